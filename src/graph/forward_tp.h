/* Tensor parallel forward (graph/forward_tp.c): every rank runs the whole op
 * program, but each matmul's output columns are split across the ranks and
 * all-gathered before the next op reads them. A column is one complete dot
 * product computed by one rank with the same kernel, blocking and activation
 * as on a single rank, and columns never depend on which other columns are
 * computed with them (row invariance), so the logits have the same bits at
 * any rank count: nothing is summed across ranks. Rank 0 (the leader) runs
 * the engine; its di_forward first broadcasts the step (batch, block tables,
 * the KV pool's geometry and its block copies since the last step), and the
 * other ranks (followers) repeat it on their own pool copy. */
#ifndef DI_GRAPH_FORWARD_TP_H
#define DI_GRAPH_FORWARD_TP_H

#include "graph/forward.h"

/* The leader's messages: a fixed header, then `payload` bytes. */
enum { DI_TP_STOP = 1, DI_TP_LOAD = 2, DI_TP_FORWARD = 3, DI_TP_MTP = 4 /* FORWARD of the MTP module, with the hidden states */ };
typedef struct di_tp_msg {
  int32_t cmd;
  int32_t a[15];
  uint64_t pool_id, payload;
} di_tp_msg;

/* LOAD's arguments (a[]); the payload is the model path. */
enum { DI_TP_A_THREADS, DI_TP_A_MAX_BATCH, DI_TP_A_MMAP, DI_TP_A_WINDOW, DI_TP_A_SWA_PATTERN, DI_TP_A_V4_MTP };

/* Leader: sends h and its payload. Follower: receives the next message
 * (waiting without a deadline), the payload into *buf (grown as needed). */
di_code di_tp_send(di_tp_msg *h, const void *payload, di_status *st);
di_code di_tp_recv(di_tp_msg *h, void **buf, size_t *cap, di_status *st);

/* Leader: tells the followers to load the model at path as f was made (LOAD),
 * waits until every rank has it, and makes f's forward tensor parallel. */
di_code di_forward_tp_lead(di_forward_ctx *f, const char *path, int threads, int max_batch, bool use_mmap,
                           di_status *st);
/* Every rank's memory once loaded (exchanged at LOAD, read by rank 0's
 * reports): weight bytes held (model held_bytes) and resident set size. */
typedef struct di_tp_mem {
  uint64_t weights, rss;
  uint64_t kv; /* its KV pool's bytes (the leader's latest pool; 0 before the first step) */
} di_tp_mem;
/* Every rank's, in rank order, after the last LOAD; 0 when not tensor parallel. */
int di_tp_memory(const di_tp_mem **out);
/* This process's resident set size (Linux VmRSS), 0 when unknown. */
uint64_t di_tp_rss_bytes(void);
/* Follower: the LOAD's memory exchange (after every rank has loaded f's model). */
di_code di_forward_tp_follow_memory(di_forward_ctx *f, di_status *st);
/* Follower: makes f's forward tensor parallel (f made from a LOAD message). */
di_code di_forward_tp_follow_init(di_forward_ctx *f, di_status *st);
/* Follower: runs one FORWARD or MTP message. */
di_code di_forward_tp_follow(di_forward_ctx *f, const di_tp_msg *h, const void *payload, di_status *st);

#endif
