/* The worker's data-plane loop: one iteration of a rank's program, run in compiled code.

   workers/engine.py loads this library and documents it; workers/scheduler.py drives it. The
   program is the schedule format's (docs/schedules.md): streams of send / recv / compute ops,
   ops of a stream in order, an op also waits for its `after` ops, sends are eager, receives
   match first in, first out per (src, tag). Python keeps what is rare: faults, the control
   socket, heartbeats, monitors (`run_step` returns to it at least every `slice_s`).

   Sends: a send op is cut into `send_pieces` nearly equal chunks (`chunk_end`); each goes out
   as a 16-byte header (iteration, src, tag, bytes; little-endian u32) and one chunk. A chunk of
   at least ZERO_COPY_MIN bytes goes zero-copy, tracked: its region is in flight until libzmq's
   I/O thread releases it (`release_cb`), and no receive writes into a region in flight.
   Receives: a chunk for a posted recv is reduced (elementwise sum, in the buffer's dtype) or
   copied into place straight from libzmq's message; a chunk that comes before its recv is
   posted, or while its target region is in flight, waits as a message in the key's stash; a
   chunk of a later iteration waits in the engine (`keep_early`).

   libzmq is called through the functions of the copy pyzmq loaded (`eng_load`), so the
   sockets pyzmq made (`Socket.underlying`) are used as they are. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- libzmq's ABI (zmq.h, 4.x) ---------------------------------------------------- */
typedef struct zmq_msg_t {
  unsigned char _[64] __attribute__((aligned(sizeof(void *))));
} zmq_msg_t;
typedef struct {
  void *socket;
  int fd;
  short events;
  short revents;
} zmq_pollitem_t;
typedef void(zmq_free_fn)(void *data, void *hint);
#define ZMQ_DONTWAIT 1
#define ZMQ_SNDMORE 2
#define ZMQ_POLLIN 1
#define ZMQ_POLLOUT 2

static struct {
  int (*msg_init)(zmq_msg_t *);
  int (*msg_init_data)(zmq_msg_t *, void *, size_t, zmq_free_fn *, void *);
  int (*msg_send)(zmq_msg_t *, void *, int);
  int (*msg_recv)(zmq_msg_t *, void *, int);
  int (*msg_close)(zmq_msg_t *);
  void *(*msg_data)(zmq_msg_t *);
  size_t (*msg_size)(const zmq_msg_t *);
  int (*send)(void *, const void *, size_t, int);
  int (*recv)(void *, void *, size_t, int);
  int (*poll)(zmq_pollitem_t *, int, long);
  int (*errno_)(void);
} Z;

/* Bind to the libzmq already loaded from `path` (pyzmq's). 0: done; -1: not loaded; -2: a
   function is missing. */
int eng_load(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return -1;
#define SYM(field, name) \
  if (!(*(void **)&Z.field = dlsym(h, name))) return -2;
  SYM(msg_init, "zmq_msg_init")
  SYM(msg_init_data, "zmq_msg_init_data")
  SYM(msg_send, "zmq_msg_send")
  SYM(msg_recv, "zmq_msg_recv")
  SYM(msg_close, "zmq_msg_close")
  SYM(msg_data, "zmq_msg_data")
  SYM(msg_size, "zmq_msg_size")
  SYM(send, "zmq_send")
  SYM(recv, "zmq_recv")
  SYM(poll, "zmq_poll")
  SYM(errno_, "zmq_errno")
#undef SYM
  return 0;
}

/* ---- constants (read by workers/engine.py through eng_constant) --------------------- */
#define CHUNK_ALIGN 64          /* chunk boundaries within an op fall on multiples of this */
#define ZERO_COPY_MIN (8 << 10) /* smaller chunks are copied into their message */
#define RECEIVE_BUDGET 64       /* messages taken per loop turn, so sends get their turn */
#define SHORT_SLEEP_S 100e-6    /* a wait shorter than a poll's millisecond: sleep this, then look again */
#define HEADER_BYTES 16

enum { SEND = 0, RECV = 1, COMPUTE = 2 }; /* contract.schedule's kind codes */
enum { DONE = 0, YIELD = 1, EXTRA = 2 }; /* run_step's outcomes */
enum {
  ERR_HEADER = -1,    /* a: the header's size */
  ERR_ITERATION = -2, /* src; a: the iteration the message is of */
  ERR_TOO_MANY = -3,  /* src; a: tag, b: op index, c: op length */
  ERR_SIZE = -4,      /* src; a: bytes received, b: bytes the header said */
  ERR_UNKNOWN = -5,   /* src; a: tag (no recv of this program matches it) */
  ERR_ZMQ = -6,       /* a: errno, b: where (1 poll, 2 send, 3 recv) */
  ERR_MEMORY = -7,
};

long eng_constant(const char *name) {
  if (!strcmp(name, "CHUNK_ALIGN")) return CHUNK_ALIGN;
  if (!strcmp(name, "ZERO_COPY_MIN")) return ZERO_COPY_MIN;
  if (!strcmp(name, "RECEIVE_BUDGET")) return RECEIVE_BUDGET;
  if (!strcmp(name, "HEADER_BYTES")) return HEADER_BYTES;
  if (!strcmp(name, "DONE")) return DONE;
  if (!strcmp(name, "YIELD")) return YIELD;
  if (!strcmp(name, "EXTRA")) return EXTRA;
  return -1;
}

/* How many wire chunks a send of `length` bytes goes out as: length / chunk_bytes (at least
   1) nearly equal chunks, each at least chunk_bytes (or the whole op) and under twice that. */
int64_t send_pieces(int64_t length, int64_t chunk_bytes) {
  int64_t p = length / chunk_bytes;
  return p > 1 ? p : 1;
}

/* End (relative to the op) of chunk k (1-based) of `pieces`: on a CHUNK_ALIGN boundary,
   except the last. */
int64_t chunk_end(int64_t length, int64_t pieces, int64_t k) {
  if (k >= pieces) return length;
  return (int64_t)((__int128)k * length / pieces) / CHUNK_ALIGN * CHUNK_ALIGN;
}

static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* Python's time.monotonic: workers.protocol.now */
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void short_sleep(double s) {
  struct timespec ts = {0, (long)(s * 1e9)};
  nanosleep(&ts, NULL);
}

/* ---- reduce: target += data, elementwise, in the buffer's dtype ---------------------- */
enum { F32 = 0, F64 = 1, F16 = 2, I8 = 3, I16 = 4, I32 = 5, I64 = 6 };
typedef float uf32 __attribute__((aligned(1), may_alias));
typedef double uf64 __attribute__((aligned(1), may_alias));
typedef _Float16 uf16 __attribute__((aligned(1), may_alias));
typedef uint8_t uu8 __attribute__((aligned(1), may_alias));
typedef uint16_t uu16 __attribute__((aligned(1), may_alias));
typedef uint32_t uu32 __attribute__((aligned(1), may_alias));
typedef uint64_t uu64 __attribute__((aligned(1), may_alias));

#define ADD_LOOP(T)                                   \
  {                                                   \
    T *restrict t = (T *)target;                      \
    const T *restrict d = (const T *)data;            \
    size_t m = n / sizeof(T);                         \
    for (size_t i = 0; i < m; i++) t[i] = t[i] + d[i]; \
  }                                                   \
  break;

/* Integers add modulo 2^bits, as numpy's do: unsigned arithmetic gives the same bits. */
static void add_into(int dtype, uint8_t *target, const uint8_t *data, size_t n) {
  switch (dtype) {
    case F32: ADD_LOOP(uf32)
    case F64: ADD_LOOP(uf64)
    case F16: ADD_LOOP(uf16)
    case I8: ADD_LOOP(uu8)
    case I16: ADD_LOOP(uu16)
    case I32: ADD_LOOP(uu32)
    case I64: ADD_LOOP(uu64)
  }
}

/* Exported for the tests: the reduce the engine applies to a received chunk. */
void eng_add(int dtype, uint8_t *target, const uint8_t *data, size_t n) { add_into(dtype, target, data, n); }

/* ---- the engine: what outlives an iteration ----------------------------------------- */
typedef struct {
  const uint8_t *lo, *hi; /* the region libzmq may still read */
  int32_t peer;
  int released; /* set by libzmq's I/O thread */
} slot_t;

static void release_cb(void *data, void *hint) {
  (void)data;
  __atomic_store_n(&((slot_t *)hint)->released, 1, __ATOMIC_RELEASE);
}

static inline int released(const slot_t *s) { return __atomic_load_n(&s->released, __ATOMIC_ACQUIRE); }

/* A message kept for later: in a run's stash (its recv not posted yet, or its region in
   flight), or in the engine (of a later iteration). */
typedef struct node_s {
  zmq_msg_t msg;
  uint32_t iteration, src, tag;
  struct node_s *next;
} node_t;

typedef struct {
  slot_t **q; /* zero-copy sends, oldest first: q[head..tail) */
  int64_t head, tail, cap;
  int keep_early;
  node_t *early; /* messages of later iterations, in arrival order */
} eng_t;

eng_t *eng_new(void) { return calloc(1, sizeof(eng_t)); }

void eng_set_keep_early(eng_t *e, int keep) { e->keep_early = keep; }

static void prune(eng_t *e) {
  while (e->head < e->tail && released(e->q[e->head])) free(e->q[e->head++]);
}

static int track(eng_t *e, slot_t *s) {
  if (e->tail == e->cap) {
    if (e->head > 0) {
      memmove(e->q, e->q + e->head, (size_t)(e->tail - e->head) * sizeof(slot_t *));
      e->tail -= e->head;
      e->head = 0;
    } else {
      int64_t cap = e->cap ? 2 * e->cap : 256;
      slot_t **q = realloc(e->q, (size_t)cap * sizeof(slot_t *));
      if (!q) return -1;
      e->q = q;
      e->cap = cap;
    }
  }
  e->q[e->tail++] = s;
  return 0;
}

/* No zero-copy send of memory overlapping [lo, hi) is still held by libzmq. */
static int region_free(eng_t *e, const uint8_t *lo, const uint8_t *hi) {
  prune(e);
  for (int64_t i = e->head; i < e->tail; i++) {
    slot_t *s = e->q[i];
    if (s->lo < hi && lo < s->hi && !released(s)) return 0;
  }
  return 1;
}

/* Zero-copy sends still held by libzmq; *peer: the oldest one's destination. */
int64_t eng_in_flight(eng_t *e, int32_t *peer) {
  prune(e);
  int64_t n = 0;
  *peer = -1;
  for (int64_t i = e->head; i < e->tail; i++)
    if (!released(e->q[i])) {
      if (!n) *peer = e->q[i]->peer;
      n++;
    }
  return n;
}

/* Wait until libzmq released every zero-copy send (before a buffer changes), at most
   `timeout_s`. Returns the sends still held (0: all released); *peer as eng_in_flight. */
int64_t eng_wait_sends(eng_t *e, double timeout_s, int32_t *peer) {
  double deadline = now() + timeout_s;
  int64_t n;
  while ((n = eng_in_flight(e, peer)) > 0 && now() < deadline) short_sleep(SHORT_SLEEP_S);
  return n;
}

/* Drops the messages kept for later iterations. Sends still in flight keep their slots:
   libzmq may release them after this. */
void eng_free(eng_t *e) {
  if (!e) return;
  for (node_t *m = e->early, *next; m; m = next) {
    next = m->next;
    Z.msg_close(&m->msg);
    free(m);
  }
  prune(e);
  if (e->head == e->tail) free(e->q);
  free(e);
}

/* ---- one rank's program, as arrays (workers/program.py `Program.arrays`) -------------- */
typedef struct {
  int64_t nops, nstreams, nkeys;
  const int8_t *kind, *reduce;
  const int32_t *stream, *peer, *buf, *sock, *key;
  const int64_t *offset, *length;
  const uint32_t *tag;
  const double *seconds;
  const int64_t *after_ptr, *after_idx; /* CSR: op i waits for after_idx[after_ptr[i]..after_ptr[i+1]) */
  const int64_t *stream_ptr;            /* the ops of stream s: stream_ptr[s]..stream_ptr[s+1] */
  const int64_t *wakes_ptr, *wakes_idx; /* CSR: streams whose head op i completing may start */
  const int32_t *key_src;               /* recv keys: (src, tag) pairs, and how many recvs each */
  const uint32_t *key_tag;
  const int64_t *key_ptr; /* the recvs of key k post into postq[key_ptr[k]..key_ptr[k+1]) */
} prog_t;

/* What the run reports, read by Python between steps. */
typedef struct {
  int64_t ndone, bytes_sent, bytes_received, computes, stashed;
  double last_progress;
  int64_t err, err_src, err_a, err_b, err_c;
} stats_t;

/* The run's memory that Python owns (numpy arrays), and its sockets. */
typedef struct {
  void *pull;
  void **socks;  /* PUSH sockets, indexed by prog->sock */
  int32_t *extra_fd; /* ZMQ_FD of the sockets Python handles (monitors, control): polled as
                        plain descriptors, so a turn of the loop asks libzmq about the data
                        sockets only; readable means "Python, look" (it drains them) */
  int64_t nsocks, nextra, npeers;
  uint8_t **bufs; /* base of every buffer, indexed by prog->buf */
  const int32_t *dtype;
  double *started, *ended;        /* per op */
  double *last_heard;             /* per peer: when its last chunk came */
  int64_t *remaining_with, *sends_to; /* per peer: send+recv ops, sends, still to run */
  uint8_t *blocked;               /* per socket: its PUSH queue is full */
  stats_t *stats;
  int64_t chunk_bytes;
  uint32_t iteration, rank;
} io_t;

typedef struct {
  const prog_t *p;
  io_t *io;
  eng_t *e;
  uint8_t *done, *busy;
  int64_t *pos, *pieces, *chunks, *cursor; /* cursor[s]: absolute index of stream s's head */
  int32_t *stale;
  int64_t nstale;
  int32_t *sends, *computes; /* ops in progress */
  int64_t nsends;
  double *deadline;
  int32_t *postq;
  int64_t *post_head, *post_tail;
  node_t **st_head, **st_tail;
  int32_t *stash_keys; /* keys whose stash may be non-empty */
  uint8_t *in_stash_keys;
  int64_t nstash_keys;
  int64_t *hkeys; /* (src << 32 | tag) + 1, 0 = empty */
  int32_t *hvals;
  int64_t hmask;
  int32_t *blocked_list;
  int64_t nblocked;
  zmq_pollitem_t *items;
} run_t;

static inline uint64_t hash64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

static int32_t key_of(const run_t *r, uint32_t src, uint32_t tag) {
  uint64_t k = ((uint64_t)src << 32 | tag) + 1;
  for (uint64_t h = hash64(k) & r->hmask;; h = (h + 1) & r->hmask) {
    if (r->hkeys[h] == (int64_t)k) return r->hvals[h];
    if (!r->hkeys[h]) return -1;
  }
}

void run_free(run_t *r);

static void append_stash(run_t *r, int32_t k, node_t *m) {
  if (r->st_tail[k]) r->st_tail[k]->next = m;
  else r->st_head[k] = m;
  r->st_tail[k] = m;
  if (!r->in_stash_keys[k]) {
    r->in_stash_keys[k] = 1;
    r->stash_keys[r->nstash_keys++] = k;
  }
  r->io->stats->stashed++;
}

static int fail(run_t *r, int code, int64_t src, int64_t a, int64_t b, int64_t c) {
  stats_t *st = r->io->stats;
  st->err = code;
  st->err_src = src;
  st->err_a = a;
  st->err_b = b;
  st->err_c = c;
  return code;
}

/* A run of `p` for iteration io->iteration; takes the engine's early messages of it. NULL:
   out of memory. */
run_t *run_new(const prog_t *p, io_t *io, eng_t *e) {
  run_t *r = calloc(1, sizeof(run_t));
  if (!r) return NULL;
  r->p = p;
  r->io = io;
  r->e = e;
  int64_t n = p->nops, ns = p->nstreams, nk = p->nkeys;
  int64_t hcap = 16;
  while (hcap < 2 * nk) hcap *= 2;
  r->hmask = hcap - 1;
  r->done = calloc((size_t)n + 1, 1);
  r->busy = calloc((size_t)ns + 1, 1);
  r->pos = calloc((size_t)n + 1, sizeof(int64_t));
  r->pieces = calloc((size_t)n + 1, sizeof(int64_t));
  r->chunks = calloc((size_t)n + 1, sizeof(int64_t));
  r->cursor = calloc((size_t)ns + 1, sizeof(int64_t));
  r->stale = calloc((size_t)(ns + p->wakes_ptr[n]) + 1, sizeof(int32_t));
  r->sends = calloc((size_t)n + 1, sizeof(int32_t));
  r->computes = calloc((size_t)n + 1, sizeof(int32_t));
  r->deadline = calloc((size_t)n + 1, sizeof(double));
  r->postq = calloc((size_t)p->key_ptr[nk] + 1, sizeof(int32_t));
  r->post_head = calloc((size_t)nk + 1, sizeof(int64_t));
  r->post_tail = calloc((size_t)nk + 1, sizeof(int64_t));
  r->st_head = calloc((size_t)nk + 1, sizeof(node_t *));
  r->st_tail = calloc((size_t)nk + 1, sizeof(node_t *));
  r->stash_keys = calloc((size_t)nk + 1, sizeof(int32_t));
  r->in_stash_keys = calloc((size_t)nk + 1, 1);
  r->hkeys = calloc((size_t)hcap, sizeof(int64_t));
  r->hvals = calloc((size_t)hcap, sizeof(int32_t));
  r->blocked_list = calloc((size_t)io->nsocks + 1, sizeof(int32_t));
  r->items = calloc((size_t)(1 + io->nsocks + io->nextra), sizeof(zmq_pollitem_t));
  if (!r->done || !r->busy || !r->pos || !r->pieces || !r->chunks || !r->cursor || !r->stale || !r->sends ||
      !r->computes || !r->deadline || !r->postq || !r->post_head || !r->post_tail || !r->st_head || !r->st_tail ||
      !r->stash_keys || !r->in_stash_keys || !r->hkeys || !r->hvals || !r->blocked_list || !r->items) {
    run_free(r);
    return NULL;
  }
  for (int64_t k = 0; k < nk; k++) {
    r->post_head[k] = r->post_tail[k] = p->key_ptr[k];
    uint64_t key = ((uint64_t)(uint32_t)p->key_src[k] << 32 | p->key_tag[k]) + 1;
    uint64_t h = hash64(key) & r->hmask;
    while (r->hkeys[h]) h = (h + 1) & r->hmask;
    r->hkeys[h] = (int64_t)key;
    r->hvals[h] = (int32_t)k;
  }
  for (int64_t s = 0; s < ns; s++) {
    r->cursor[s] = p->stream_ptr[s];
    r->stale[r->nstale++] = (int32_t)(ns - 1 - s); /* popped from the end: stream 0 first */
  }
  memset(io->stats, 0, sizeof(stats_t));
  io->stats->last_progress = now();
  /* messages an earlier iteration kept for this one */
  node_t **link = &e->early;
  while (*link) {
    node_t *m = *link;
    if (m->iteration != io->iteration) {
      link = &m->next;
      continue;
    }
    *link = m->next;
    m->next = NULL;
    int32_t k = key_of(r, m->src, m->tag);
    if (k < 0) {
      fail(r, ERR_UNKNOWN, m->src, m->tag, 0, 0);
      Z.msg_close(&m->msg);
      free(m);
      continue;
    }
    append_stash(r, k, m);
  }
  return r;
}

void run_free(run_t *r) {
  if (!r) return;
  if (r->st_head)
    for (int64_t k = 0; k < r->p->nkeys; k++)
      for (node_t *m = r->st_head[k], *next; m; m = next) {
        next = m->next;
        Z.msg_close(&m->msg);
        free(m);
      }
  free(r->done), free(r->busy), free(r->pos), free(r->pieces), free(r->chunks), free(r->cursor);
  free(r->stale), free(r->sends), free(r->computes), free(r->deadline), free(r->postq);
  free(r->post_head), free(r->post_tail), free(r->st_head), free(r->st_tail), free(r->stash_keys);
  free(r->in_stash_keys), free(r->hkeys), free(r->hvals), free(r->blocked_list), free(r->items);
  free(r);
}

/* ---- op life cycle ------------------------------------------------------------------ */
static void complete(run_t *r, int64_t i) {
  const prog_t *p = r->p;
  io_t *io = r->io;
  double t = now();
  r->done[i] = 1;
  io->ended[i] = t;
  io->stats->ndone++;
  int32_t s = p->stream[i];
  r->cursor[s]++;
  r->busy[s] = 0;
  for (int64_t w = p->wakes_ptr[i]; w < p->wakes_ptr[i + 1]; w++) r->stale[r->nstale++] = (int32_t)p->wakes_idx[w];
  if (p->kind[i] != COMPUTE) {
    io->remaining_with[p->peer[i]]--;
    if (p->kind[i] == SEND) io->sends_to[p->peer[i]]--;
  }
  io->stats->last_progress = t;
}

/* Queue as many chunks of send op i as its socket takes. 1: all queued (op complete);
   0: the socket is full; < 0: failed. */
static int pump_send(run_t *r, int64_t i) {
  const prog_t *p = r->p;
  io_t *io = r->io;
  int32_t si = p->sock[i];
  void *sock = io->socks[si];
  uint8_t *base = io->bufs[p->buf[i]] + p->offset[i];
  int64_t length = p->length[i];
  while (r->pos[i] < length) {
    int64_t n = chunk_end(length, r->pieces[i], r->chunks[i] + 1) - r->pos[i];
    uint32_t header[4] = {io->iteration, io->rank, p->tag[i], (uint32_t)n};
    if (Z.send(sock, header, HEADER_BYTES, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
      int err = Z.errno_();
      if (err == EAGAIN || err == EINTR) {
        if (!io->blocked[si]) {
          io->blocked[si] = 1;
          r->blocked_list[r->nblocked++] = si;
        }
        return 0;
      }
      return fail(r, ERR_ZMQ, p->peer[i], err, 2, 0);
    }
    uint8_t *chunk = base + r->pos[i];
    /* the first frame taken, libzmq takes the rest of the message: no EAGAIN here */
    if (n >= ZERO_COPY_MIN) {
      slot_t *s = malloc(sizeof(slot_t));
      if (!s || track(r->e, s)) return fail(r, ERR_MEMORY, -1, 0, 0, 0);
      s->lo = chunk;
      s->hi = chunk + n;
      s->peer = p->peer[i];
      s->released = 0;
      zmq_msg_t msg;
      Z.msg_init_data(&msg, chunk, (size_t)n, release_cb, s);
      if (Z.msg_send(&msg, sock, ZMQ_DONTWAIT) < 0) {
        int err = Z.errno_();
        Z.msg_close(&msg);
        return fail(r, ERR_ZMQ, p->peer[i], err, 2, 0);
      }
    } else if (Z.send(sock, chunk, (size_t)n, ZMQ_DONTWAIT) < 0) {
      return fail(r, ERR_ZMQ, p->peer[i], Z.errno_(), 2, 0);
    }
    r->pos[i] += n;
    r->chunks[i]++;
    io->stats->bytes_sent += n;
    io->stats->last_progress = now();
  }
  complete(r, i);
  return 1;
}

static int pump_sends(run_t *r) {
  if (!r->nsends) return 0;
  for (int64_t b = 0; b < r->nblocked; b++) r->io->blocked[r->blocked_list[b]] = 0;
  r->nblocked = 0;
  int64_t kept = 0;
  for (int64_t j = 0; j < r->nsends; j++) {
    int32_t i = r->sends[j];
    int rc = pump_send(r, i);
    if (rc < 0) return rc;
    if (rc == 0) r->sends[kept++] = i;
  }
  r->nsends = kept;
  return 0;
}

/* Account n received bytes of recv op i: reduce or copy `data` into place. */
static void apply(run_t *r, int64_t i, const uint8_t *data, int64_t n) {
  const prog_t *p = r->p;
  io_t *io = r->io;
  uint8_t *target = io->bufs[p->buf[i]] + p->offset[i] + r->pos[i];
  if (p->reduce[i]) add_into(io->dtype[p->buf[i]], target, data, (size_t)n);
  else memcpy(target, data, (size_t)n);
  r->pos[i] += n;
  io->stats->bytes_received += n;
  double t = now();
  io->stats->last_progress = io->last_heard[p->peer[i]] = t;
  if (r->pos[i] == p->length[i]) {
    r->post_head[p->key[i]]++;
    complete(r, i);
  }
}

static int fits(run_t *r, int64_t i, int64_t n) {
  const prog_t *p = r->p;
  if (r->pos[i] + n > p->length[i]) return fail(r, ERR_TOO_MANY, p->peer[i], p->tag[i], i, p->length[i]);
  return 0;
}

/* Apply key k's stashed chunks to its posted recvs, in order, while their regions are free. */
static int drain_stash(run_t *r, int32_t k) {
  const prog_t *p = r->p;
  while (r->st_head[k] && r->post_head[k] < r->post_tail[k]) {
    int64_t i = r->postq[r->post_head[k]];
    node_t *m = r->st_head[k];
    int64_t n = (int64_t)Z.msg_size(&m->msg);
    int rc = fits(r, i, n);
    if (rc) return rc;
    uint8_t *lo = r->io->bufs[p->buf[i]] + p->offset[i] + r->pos[i];
    if (!region_free(r->e, lo, lo + n)) return 0;
    r->st_head[k] = m->next;
    if (!m->next) r->st_tail[k] = NULL;
    r->io->stats->stashed--;
    apply(r, i, Z.msg_data(&m->msg), n);
    Z.msg_close(&m->msg);
    free(m);
  }
  return 0;
}

static int drain_stashes(run_t *r) {
  if (!r->io->stats->stashed) return 0;
  int64_t kept = 0;
  for (int64_t j = 0; j < r->nstash_keys; j++) {
    int32_t k = r->stash_keys[j];
    int rc = drain_stash(r, k);
    if (rc) return rc;
    if (r->st_head[k]) r->stash_keys[kept++] = k;
    else r->in_stash_keys[k] = 0;
  }
  r->nstash_keys = kept;
  return 0;
}

/* Some stashed chunk has its recv posted (it waits for a region in flight). */
static int stash_waiting(run_t *r) {
  if (!r->io->stats->stashed) return 0;
  for (int64_t j = 0; j < r->nstash_keys; j++) {
    int32_t k = r->stash_keys[j];
    if (r->st_head[k] && r->post_head[k] < r->post_tail[k]) return 1;
  }
  return 0;
}

static int stash(run_t *r, int32_t k, uint32_t src) {
  node_t *m = malloc(sizeof(node_t));
  if (!m) return fail(r, ERR_MEMORY, -1, 0, 0, 0);
  Z.msg_init(&m->msg);
  if (Z.msg_recv(&m->msg, r->io->pull, ZMQ_DONTWAIT) < 0) {
    int err = Z.errno_();
    Z.msg_close(&m->msg);
    free(m);
    return fail(r, ERR_ZMQ, src, err, 3, 0);
  }
  m->next = NULL;
  append_stash(r, k, m);
  r->io->stats->last_progress = r->io->last_heard[src] = now();
  return 0;
}

/* Take up to RECEIVE_BUDGET messages off the PULL socket. */
static int receive(run_t *r) {
  const prog_t *p = r->p;
  io_t *io = r->io;
  for (int b = 0; b < RECEIVE_BUDGET; b++) {
    uint32_t header[4];
    int got = Z.recv(io->pull, header, HEADER_BYTES, ZMQ_DONTWAIT);
    if (got < 0) {
      int err = Z.errno_();
      if (err == EAGAIN || err == EINTR) return 0;
      return fail(r, ERR_ZMQ, -1, err, 3, 0);
    }
    if (got != HEADER_BYTES) return fail(r, ERR_HEADER, -1, got, 0, 0);
    uint32_t iteration = header[0], src = header[1], tag = header[2];
    int64_t n = header[3];
    if (iteration > io->iteration && r->e->keep_early) {
      node_t *m = malloc(sizeof(node_t));
      if (!m) return fail(r, ERR_MEMORY, -1, 0, 0, 0);
      Z.msg_init(&m->msg);
      if (Z.msg_recv(&m->msg, io->pull, ZMQ_DONTWAIT) < 0) {
        int err = Z.errno_();
        Z.msg_close(&m->msg);
        free(m);
        return fail(r, ERR_ZMQ, src, err, 3, 0);
      }
      m->iteration = iteration;
      m->src = src;
      m->tag = tag;
      m->next = NULL;
      node_t **link = &r->e->early;
      while (*link) link = &(*link)->next;
      *link = m;
      continue;
    }
    if (iteration != io->iteration) return fail(r, ERR_ITERATION, src, iteration, 0, 0);
    if (src >= (uint32_t)io->npeers) return fail(r, ERR_UNKNOWN, src, tag, 0, 0);
    int32_t k = key_of(r, src, tag);
    if (k < 0) return fail(r, ERR_UNKNOWN, src, tag, 0, 0);
    if (r->post_head[k] < r->post_tail[k] && !r->st_head[k]) {
      int64_t i = r->postq[r->post_head[k]];
      int rc = fits(r, i, n);
      if (rc) return rc;
      uint8_t *lo = io->bufs[p->buf[i]] + p->offset[i] + r->pos[i];
      if (region_free(r->e, lo, lo + n)) {
        zmq_msg_t msg;
        Z.msg_init(&msg);
        if (Z.msg_recv(&msg, io->pull, ZMQ_DONTWAIT) < 0) {
          int err = Z.errno_();
          Z.msg_close(&msg);
          return fail(r, ERR_ZMQ, src, err, 3, 0);
        }
        int64_t size = (int64_t)Z.msg_size(&msg);
        if (size != n) {
          Z.msg_close(&msg);
          return fail(r, ERR_SIZE, src, size, n, 0);
        }
        apply(r, i, Z.msg_data(&msg), n);
        Z.msg_close(&msg);
        continue;
      }
    }
    int rc = stash(r, k, src);
    if (rc) return rc;
  }
  return 0;
}

/* Start every stream head whose dependencies are done, until nothing changes. Only an op
   completing can make a head startable: only the streams it wakes are looked at. */
static int advance(run_t *r) {
  const prog_t *p = r->p;
  io_t *io = r->io;
  while (r->nstale) {
    int32_t s = r->stale[--r->nstale];
    int64_t i = r->cursor[s];
    if (r->busy[s] || i >= p->stream_ptr[s + 1]) continue;
    int ready = 1;
    for (int64_t a = p->after_ptr[i]; a < p->after_ptr[i + 1]; a++)
      if (!r->done[p->after_idx[a]]) {
        ready = 0;
        break;
      }
    if (!ready) continue;
    r->busy[s] = 1;
    double t = now();
    io->started[i] = t;
    if (p->kind[i] == SEND) {
      r->pieces[i] = send_pieces(p->length[i], io->chunk_bytes);
      int rc = pump_send(r, i);
      if (rc < 0) return rc;
      if (rc == 0) r->sends[r->nsends++] = (int32_t)i;
    } else if (p->kind[i] == RECV) {
      int32_t k = p->key[i];
      r->postq[r->post_tail[k]++] = (int32_t)i;
      int rc = drain_stash(r, k);
      if (rc) return rc;
    } else if (p->seconds[i] <= 0) {
      complete(r, i);
    } else {
      r->deadline[i] = t + p->seconds[i];
      r->computes[io->stats->computes++] = (int32_t)i;
    }
  }
  return 0;
}

static void finish_computes(run_t *r) {
  int64_t kept = 0, n = r->io->stats->computes;
  double t = now();
  for (int64_t j = 0; j < n; j++) {
    int32_t i = r->computes[j];
    if (r->deadline[i] <= t) complete(r, i);
    else r->computes[kept++] = i;
  }
  r->io->stats->computes = kept;
}

/* Run until the program is done (DONE), `slice_s` has passed or a signal came (YIELD:
   Python checks for faults, then calls again), an extra socket has an event (EXTRA: Python
   reads the monitors and the control socket too), or a failure (< 0, described in stats). */
int run_step(run_t *r, double slice_s) {
  const prog_t *p = r->p;
  io_t *io = r->io;
  stats_t *st = io->stats;
  if (st->err) return (int)st->err;
  double t_end = now() + slice_s;
  for (;;) {
    int rc;
    if ((rc = advance(r))) return rc;
    if (st->ndone == p->nops) return DONE;
    if ((rc = pump_sends(r))) return rc;
    if ((rc = drain_stashes(r))) return rc;
    if ((rc = advance(r))) return rc;
    if (st->ndone == p->nops) return DONE;
    double t = now(), wait = t_end - t;
    for (int64_t j = 0; j < st->computes; j++) {
      double left = r->deadline[r->computes[j]] - t;
      if (left < wait) wait = left;
    }
    if (wait < 0) wait = 0;
    int short_wait = 0;
    if (stash_waiting(r)) { /* libzmq tells nothing when a region is released: look again soon */
      wait = wait < SHORT_SLEEP_S ? wait : SHORT_SLEEP_S;
      short_wait = 1;
    }
    long timeout_ms = (long)(wait * 1000.0);
    if (timeout_ms == 0 && wait > 0) short_wait = 1;
    int n = 0;
    r->items[n++] = (zmq_pollitem_t){io->pull, 0, ZMQ_POLLIN, 0};
    for (int64_t b = 0; b < r->nblocked; b++) r->items[n++] = (zmq_pollitem_t){io->socks[r->blocked_list[b]], 0, ZMQ_POLLOUT, 0};
    int first_extra = n;
    for (int64_t x = 0; x < io->nextra; x++) r->items[n++] = (zmq_pollitem_t){NULL, io->extra_fd[x], ZMQ_POLLIN, 0};
    int events = Z.poll(r->items, n, short_wait ? 0 : timeout_ms);
    if (events < 0) {
      int err = Z.errno_();
      if (err == EINTR) return YIELD; /* a signal: Python runs its handler */
      return fail(r, ERR_ZMQ, -1, err, 1, 0);
    }
    if (events == 0 && short_wait) short_sleep(wait < SHORT_SLEEP_S ? wait : SHORT_SLEEP_S);
    if (r->items[0].revents & ZMQ_POLLIN)
      if ((rc = receive(r))) return rc;
    if (st->computes) finish_computes(r);
    for (int x = first_extra; x < n; x++)
      if (r->items[x].revents) return EXTRA;
    if (now() >= t_end) return YIELD;
  }
}

/* Bytes still awaited from every peer by the posted recvs (a timeout names the peer). */
void run_waiting(run_t *r, int64_t *bytes_per_peer) {
  const prog_t *p = r->p;
  for (int64_t k = 0; k < p->nkeys; k++)
    for (int64_t q = r->post_head[k]; q < r->post_tail[k]; q++) {
      int32_t i = r->postq[q];
      bytes_per_peer[p->peer[i]] += p->length[i] - r->pos[i];
    }
}
