// stackdemo: a stand-in "training rank" used to capture REAL stack fixtures with gdb and
// eu-stack. It is not built by CMake; the fixtures next to it were produced with:
//
//   g++ -std=c++20 -O0 -g -pthread stackdemo.cc -o /tmp/stackdemo
//   /tmp/stackdemo collective & /tmp/stackdemo collective & /tmp/stackdemo collective &
//   /tmp/stackdemo p2p &                      # the "hung" rank
//   gdb -batch -p <pid> -ex 'thread apply all bt'  > gdb_rank<r>.txt
//   eu-stack -p <pid>                            > eustack_rank<r>.txt
//
// Mode "collective": the main thread waits on a condition variable inside
// AllReduceGradients (like a rank blocked in a collective) while a helper "data loader"
// thread sleeps. Mode "p2p": the main thread blocks in read() inside RecvActivations
// (like a rank stuck in a pipeline receive), with the same helper thread.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace demo {

std::mutex mu;
std::condition_variable cv;
bool done = false;

void DataLoaderLoop() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(3600));
}

void AllReduceGradients() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [] { return done; });
}

void RecvActivations(int fd) {
  char buf[64];
  (void)!read(fd, buf, sizeof(buf));
}

void TrainStep(bool p2p) {
  if (p2p) {
    int fds[2];
    if (pipe(fds) != 0) return;
    RecvActivations(fds[0]);
  } else {
    AllReduceGradients();
  }
}

}  // namespace demo

int main(int argc, char** argv) {
  const bool p2p = argc > 1 && std::strcmp(argv[1], "p2p") == 0;
  std::thread loader(demo::DataLoaderLoop);
  loader.detach();
  demo::TrainStep(p2p);
  return 0;
}
