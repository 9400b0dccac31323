/* HighSpeed TCP (RFC 3649) as a BPF congestion control ("struct_ops" tcp_congestion_ops).
 *
 * Written for kernels that do not ship tcp_highspeed (this project's test machines have only
 * reno, cubic and bbr built in). transfer/internal/bpf_congestion.cc loads it and registers it
 * under the name "highspeed", so a socket selects it with TCP_CONGESTION like any other; the
 * registration belongs to the loading process and ends with it.
 *
 * The algorithm:
 * - slow start as Standard TCP: +1 segment per ACKed segment up to ssthresh;
 * - congestion avoidance: +a(w) segments per window of ACKed segments, a(w) from the RFC's
 *   table (hstcp_table.h); counted per ACKed segment, so stretch ACKs (GRO, delayed ACKs) grow
 *   the window as much as one ACK per segment would (RFC 3465's byte counting);
 * - on a loss: ssthresh = w - b(w) * w;
 * - undo of a spurious reduction: back to the window before it;
 * - at or below Low_Window (38 segments) all of this is Standard TCP (a = 1, b = 0.5).
 * Only the window is counted in segments; the kernel does pacing, recovery and timers.
 *
 * The counters in `gfrep_hstcp_stats` are for operators and tests (gfprobe cc, the loader's
 * reporting): they are shared by every socket using the algorithm, updated atomically.
 */
#include "transfer/bpf/kernel_types.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "transfer/bpf/hstcp_table.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct hstcp_stats gfrep_hstcp_stats = {};

static __always_inline struct tcp_sock *tcp_of(struct sock *sk) { return (struct tcp_sock *)sk; }

/* The kernel's rule for growing: only while the window, not the application, limits sending
 * (in slow start: while less than twice what is in flight). */
static __always_inline int cwnd_limited(struct tcp_sock *tp) {
  if (tp->snd_cwnd < tp->snd_ssthresh) return tp->snd_cwnd < 2 * tp->max_packets_out;
  return BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited) != 0;
}

static __always_inline void raise_max(__u32 *slot, __u32 value) {
  /* A lost race only loses a maximum shown to operators; no lock on a per-ACK path. */
  if (value > *slot) *slot = value;
}

SEC("struct_ops/gfrep_hstcp_init")
void BPF_PROG(gfrep_hstcp_init, struct sock *sk) {
  __sync_fetch_and_add(&gfrep_hstcp_stats.sockets, 1);
}

SEC("struct_ops/gfrep_hstcp_cong_avoid")
void BPF_PROG(gfrep_hstcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked) {
  struct tcp_sock *tp = tcp_of(sk);
  __u32 cwnd = tp->snd_cwnd;

  if (!cwnd_limited(tp)) return;
  raise_max(&gfrep_hstcp_stats.max_cwnd, cwnd);
  if (cwnd < tp->snd_ssthresh) {
    __u32 grown = cwnd + acked;
    if (grown > tp->snd_ssthresh) grown = tp->snd_ssthresh;
    acked -= grown - cwnd;
    cwnd = grown < tp->snd_cwnd_clamp ? grown : tp->snd_cwnd_clamp;
    tp->snd_cwnd = cwnd;
    if (acked == 0) return;
  }

  /* No per-socket state: the row follows from the window (a 7-step search per ACK). */
  __u32 row = gfrep_hstcp_row_of(cwnd);
  raise_max(&gfrep_hstcp_stats.max_row, row);

  if (cwnd >= tp->snd_cwnd_clamp) return;
  /* w += a(w) / w per ACKed segment, a(w) = row + 1. */
  __u64 count = (__u64)tp->snd_cwnd_cnt + (__u64)(row + 1) * acked;
  if (count >= cwnd) {
    __u64 add = count / cwnd;
    count -= add * cwnd;
    __u64 next = (__u64)cwnd + add;
    if (next > tp->snd_cwnd_clamp) next = tp->snd_cwnd_clamp;
    tp->snd_cwnd = (__u32)next;
  }
  tp->snd_cwnd_cnt = (__u32)count;
}

SEC("struct_ops/gfrep_hstcp_ssthresh")
__u32 BPF_PROG(gfrep_hstcp_ssthresh, struct sock *sk) {
  __u32 cwnd = tcp_of(sk)->snd_cwnd;
  __u32 next = gfrep_hstcp_reduced(cwnd);
  __sync_fetch_and_add(&gfrep_hstcp_stats.reductions, 1);
  gfrep_hstcp_stats.last_reduction = ((__u64)cwnd << 32) | next;
  return next;
}

SEC("struct_ops/gfrep_hstcp_undo_cwnd")
__u32 BPF_PROG(gfrep_hstcp_undo_cwnd, struct sock *sk) {
  struct tcp_sock *tp = tcp_of(sk);
  __sync_fetch_and_add(&gfrep_hstcp_stats.undos, 1);
  return tp->snd_cwnd > tp->prior_cwnd ? tp->snd_cwnd : tp->prior_cwnd;
}

SEC(".struct_ops")
struct tcp_congestion_ops gfrep_highspeed = {
    .init = (void *)gfrep_hstcp_init,
    .cong_avoid = (void *)gfrep_hstcp_cong_avoid,
    .ssthresh = (void *)gfrep_hstcp_ssthresh,
    .undo_cwnd = (void *)gfrep_hstcp_undo_cwnd,
    .name = "highspeed",
};
