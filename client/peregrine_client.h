/* libperegrine_client: what a training process links (C/C++) or loads (the Python
 * package `peregrine`, through ctypes) to report progress and keep in-memory checkpoints
 * in the Peregrine agent's store. A stable C ABI: functions only, opaque handles, plain
 * integer and pointer arguments; nothing here throws or aborts.
 *
 * Under the agent, the environment names the store: PEREGRINE_CHECKPOINT_DIR (this rank's
 * directory), RANK, WORLD_SIZE, PEREGRINE_RESUME_STEP (the step to restore, 0: fresh),
 * PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES (this rank's allowance). Without them (no agent),
 * pg_available() is 0, saves are skipped with PG_NO_AGENT and loads find nothing, so a
 * script runs unchanged anywhere.
 *
 * pg_save writes the segments into a shard file in the store (shared memory the agent
 * owns; it outlives this process). In snapshot mode (the default) it fork()s: the child
 * writes the shard from its copy-on-write view of memory and pg_save returns as soon as
 * the fork does, so the caller may change the segments' memory at once; the outcome comes
 * later through pg_wait. In copy mode it returns once the copy is published. Either way
 * the agent then checksums, backs up and persists the shard asynchronously. Never more
 * than one save at a time per process (calls are serialised internally) and at most one
 * snapshot child in flight: the next pg_save, pg_load or pg_wait(1) first waits for it,
 * and so does the library at exit(). The shard format is checkpoint/shard_format.h.
 *
 * Errors: functions return a PG_* code and, where they take one, write a one-line
 * message naming what is wrong into err (truncated to err_len, always NUL-terminated). */
#ifndef PEREGRINE_CLIENT_PEREGRINE_CLIENT_H_
#define PEREGRINE_CLIENT_PEREGRINE_CLIENT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PG_OK 0
#define PG_SKIPPED 1   /* the save was skipped: over the allowance or memory short (err says
                          which); a marker tells the agent, training goes on */
#define PG_NO_AGENT 2  /* not running under a Peregrine agent: nothing saved or found */
#define PG_NOT_FOUND 3 /* no shard of that step for this rank */
#define PG_ERROR (-1)  /* bad arguments, I/O error, corrupt shard: see err */

/* 1 when a store is configured (PEREGRINE_CHECKPOINT_DIR set), else 0. */
int pg_available(void);
/* The step the agent asks this rank to restore (PEREGRINE_RESUME_STEP; 0: fresh start). */
uint64_t pg_resume_step(void);
/* The ABI version of this library (1). */
int pg_abi_version(void);

/* Prints the progress line "[peregrine] step=<step>[ loss=<loss>]" plus each "key=value"
 * of metrics (n_metrics names/values; NaN prints "nan") on stdout and flushes it. loss is
 * omitted when has_loss is 0. Any rank may call it. */
int pg_step(uint64_t step, int has_loss, double loss, const char* const* metric_names, const double* metric_values,
            size_t n_metrics);

/* Save modes. PG_MODE_DEFAULT: PEREGRINE_CHECKPOINT_MODE ("copy" or "snapshot"; unset:
 * snapshot). PG_MODE_COPY: copy into the store before returning. PG_MODE_SNAPSHOT: fork, the
 * child copies (falls back to copy, with a line on stderr, when fork fails). Memory that
 * is shared with another process (MAP_SHARED) is not snapshotted by fork: save it in copy
 * mode. */
#define PG_MODE_DEFAULT 0
#define PG_MODE_COPY 1
#define PG_MODE_SNAPSHOT 2

/* Saves segment i = (data[i], lengths[i]) for i < n_segments as this rank's shard of `step`
 * in the default mode. At most 250 segments. Returns PG_OK (copy: published; snapshot: the
 * child has its copy-on-write view and writes it), PG_SKIPPED, PG_NO_AGENT or PG_ERROR. */
int pg_save(uint64_t step, const void* const* data, const uint64_t* lengths, uint32_t n_segments, char* err,
            size_t err_len);
/* pg_save in a given mode (PG_MODE_*). */
int pg_save_mode(uint64_t step, const void* const* data, const uint64_t* lengths, uint32_t n_segments, int mode,
                 char* err, size_t err_len);

/* Reports snapshot saves' outcomes, each once, oldest first. block != 0 first waits for
 * the snapshot in flight; block == 0 only collects one that has ended. Returns
 * PG_NOT_FOUND when no outcome is waiting, else that save's PG_OK (published), PG_SKIPPED
 * (no room: the marker tells the agent) or PG_ERROR, with its step in *step (may be NULL)
 * and the reason in err. A failed snapshot never leaves a .tmp or partial .shard. */
int pg_wait(int block, uint64_t* step, char* err, size_t err_len);

/* A loaded shard, mapped read-only; valid until pg_shard_close. */
typedef struct pg_shard pg_shard;

/* Opens this rank's shard of `step` after verifying its checksum. PG_NOT_FOUND when there
 * is none, PG_ERROR when it is corrupt or partial (never returned as loaded). */
int pg_load(uint64_t step, pg_shard** out, char* err, size_t err_len);
uint64_t pg_shard_step(const pg_shard* shard);
uint32_t pg_shard_segment_count(const pg_shard* shard);
/* The segment's bytes (NULL and *length 0 when i is out of range). */
const void* pg_shard_segment(const pg_shard* shard, uint32_t i, uint64_t* length);
void pg_shard_close(pg_shard* shard);

/* Micro-batch plans (fail-slow mitigation: a slow data-parallel replica gets fewer of the
 * step's micro-batches). Under the agent, PEREGRINE_MICROBATCH_PLAN names the plan file
 * (client/microbatch_plan_format.h), present only while the controller wants an uneven
 * split. Each step, every rank of DP replica dp_rank asks which part of the step's global
 * micro-batch sequence 0 .. n*default_count-1 it runs (n replicas, default_count each in the
 * even split) and how to scale the gradients:
 *
 *   PG_OK         a plan applies to `step` (step >= its from_step): run the global
 *                 micro-batches first .. first+count-1, SUM their gradients and multiply the
 *                 sum by *gradient_scale (n/M) before the DP all-reduce AVERAGE; the average
 *                 then equals the even split's update (up to floating-point reordering).
 *   PG_NOT_FOUND  no plan, or one that starts at a later step;
 *   PG_NO_AGENT   not under an agent (PEREGRINE_MICROBATCH_PLAN unset): in both cases the
 *                 outputs hold the even split: *first = dp_rank*default_count, *count =
 *                 default_count, *gradient_scale = 1/default_count (the mean over this
 *                 replica's micro-batches). A trainer may use them as they are, or keep its
 *                 own normalisation: the plan's gradient_scale replaces exactly that
 *                 1/default_count (a trainer that sums its micro-batches without dividing
 *                 multiplies by gradient_scale*default_count instead).
 *   PG_ERROR      bad arguments (default_count 0, a NULL output), or a plan file that
 *                 cannot be read, does not parse, has no count for dp_rank or was made for
 *                 another batch (global_micro_batches != replicas*default_count): err names
 *                 the file and the field; the outputs hold the even split. Do not train on:
 *                 other replicas may follow the plan (fail the step, the controller
 *                 restarts the run, which clears the plan).
 *
 * Every rank of a replica (all its TP/PP ranks) gets the same answer for the same step.
 * Cheap to call every step: the file is re-read only when its inode, size or mtime changed
 * (one stat otherwise). `first` may be NULL. Thread-safe. */
int pg_microbatches(uint64_t step, uint32_t dp_rank, uint32_t default_count, uint32_t* first, uint32_t* count,
                    double* gradient_scale, char* err, size_t err_len);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* PEREGRINE_CLIENT_PEREGRINE_CLIENT_H_ */
