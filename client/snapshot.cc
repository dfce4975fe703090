#include "client/snapshot.h"

// The child's outcome travels in one page of shared anonymous memory mapped once by the
// parent before its first fork: the child writes the WriteOutcome there and sets `done`
// last, then _exit()s with a code that says the same thing. The parent trusts the page
// when `done` is set; otherwise (the child was killed) the exit status says why. Should
// someone else reap the child first (a waitpid(-1) in the trainer), the page still tells.
//
// _Fork() (glibc 2.34; the raw clone system call before it) is fork without the atfork
// handlers: the libraries the trainer loaded (PyTorch, OpenMP, the Python runtime) do not
// get to run code in the child or take their locks around the fork, which also keeps the
// parent's blocking time to the kernel's copy of the page tables.

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "client/peregrine_client.h"

namespace peregrine::client {
namespace {

struct SharedPage {
  std::atomic<int> done;
  WriteOutcome outcome;
};

SharedPage* page = nullptr;  // mapped once, kept for the process's life
pid_t child = 0;             // the child in flight
uint64_t child_step = 0;
std::string child_tmp_path;  // removed when the child failed

// Exit codes of the child (also carried by the page).
constexpr int kExitPublished = 0;
constexpr int kExitSkipped = 10;
constexpr int kExitError = 11;

pid_t ForkWithoutHandlers() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  return _Fork();
#else
  // Older C libraries: the raw system call skips the atfork handlers the same way (the
  // child only makes system calls, so it needs none of the library's fork bookkeeping).
  return static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0));
#endif
}

[[noreturn]] void RunChild(const ShardPlan& plan) {
  // Default dispositions, nothing blocked: a SIGTERM or SIGINT to the trainer's process
  // group ends the child too (the trainer's own handlers would run trainer code here).
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Hold none of the trainer's descriptors (its sockets, pipes to the agent, device
  // files): a peer must see them close when the trainer closes them, not when the child
  // ends. The writer opens what it needs by path. Fails harmlessly on kernels before 5.9.
  close_range(0, ~0U, 0);
  WriteShard(plan, /*parallel=*/false, &page->outcome);
  page->done.store(1, std::memory_order_release);
  _exit(page->outcome.code == PG_OK ? kExitPublished : page->outcome.code == PG_SKIPPED ? kExitSkipped : kExitError);
}

SnapshotResult Finish(int status, bool have_status) {
  SnapshotResult r;
  r.step = child_step;
  if (page->done.load(std::memory_order_acquire) != 0) {
    r.code = page->outcome.code;
    r.message = page->outcome.message;
  } else if (have_status && WIFSIGNALED(status)) {
    r.code = PG_ERROR;
    r.message = "the snapshot writer of step " + std::to_string(child_step) + " was killed by signal " +
                std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  } else if (have_status) {
    r.code = PG_ERROR;
    r.message = "the snapshot writer of step " + std::to_string(child_step) + " exited with status " +
                std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + " without a result";
  } else {
    r.code = PG_ERROR;
    r.message = "the snapshot writer of step " + std::to_string(child_step) +
                " was reaped by another waitpid() in this process before it reported a result";
  }
  if (r.code != PG_OK) unlink(child_tmp_path.c_str());  // a killed child may leave it
  child = 0;
  child_tmp_path.clear();
  return r;
}

}  // namespace

bool StartSnapshot(const ShardPlan& plan, std::string* error) {
  if (child != 0) {
    *error = "a snapshot is already in flight";
    return false;
  }
  if (page == nullptr) {
    void* p = mmap(nullptr, sizeof(SharedPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      *error = std::string("cannot map the snapshot result page: ") + std::strerror(errno);
      return false;
    }
    page = static_cast<SharedPage*>(p);
  }
  page->done.store(0, std::memory_order_relaxed);
  page->outcome.code = PG_ERROR;
  page->outcome.message[0] = '\0';
  child_tmp_path = plan.tmp_path;  // allocated before the fork, not in the child
  const pid_t pid = ForkWithoutHandlers();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    child_tmp_path.clear();
    return false;
  }
  if (pid == 0) RunChild(plan);
  child = pid;
  child_step = plan.step;
  return true;
}

pid_t SnapshotInFlight() { return child; }

std::optional<SnapshotResult> ReapSnapshot(bool block) {
  if (child == 0) return std::nullopt;
  int status = 0;
  pid_t got;
  do {
    got = waitpid(child, &status, block ? 0 : WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got == 0) return std::nullopt;  // still running
  if (got < 0) return Finish(0, /*have_status=*/false);  // ECHILD: reaped elsewhere
  return Finish(status, /*have_status=*/true);
}

}  // namespace peregrine::client
