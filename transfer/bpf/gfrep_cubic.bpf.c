/* CUBIC that keeps its window over idle ("gfrep_cubic"), as a BPF congestion control.
 *
 * Linux restarts a connection that sent nothing for longer than its retransmission timeout:
 * the window is halved once per timeout of idle down to the initial window (10 segments), as
 * RFC 5681 section 4.1 asks (net.ipv4.tcp_slow_start_after_idle, on by default, host-wide).
 * A warm session's data connection between two requests is such a connection: after 7 s of
 * idle on the 200 ms / 1 Gbit/s test route, its next files ramp from 10 segments over two
 * seconds, and 200 x 4 MiB reached 0.79 of the link against 0.87-0.88 with the restart off
 * (tests/bench/RESULTS.md). Turning the sysctl off is the host's decision, not gfrep's; this
 * control keeps the window for gfrep's own connections only.
 *
 * Everything is the kernel's CUBIC (tcp_cubic.c's functions, called as kfuncs), except:
 * - at CA_EVENT_CWND_RESTART (the kernel is about to shrink the window) the window and the
 *   slow-start threshold are noted;
 * - at CA_EVENT_TX_START (the first segment after idle has gone out) they are put back, if the
 *   idle since the last ACK was under five minutes (RFC 7661's non-validated period: a window
 *   unused for that long is no longer evidence of the path) and the restart shrank them.
 * A longer idle leaves the kernel's restart as it is. The first burst after idle is then sent
 * at the old window, as with the sysctl off.
 *
 * Per-socket state lives in the tail of icsk_ca_priv (13 x 8 bytes), after CUBIC's own struct
 * bictcp (68 bytes in every kernel since 2.6.x): words 11 and 12.
 *
 * The counters in `gfrep_cubic_stats` are for operators and tests (transfer/congestion.h),
 * shared by every socket using the control, updated atomically.
 */
#include "transfer/bpf/kernel_types.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "transfer/bpf/gfrep_cubic_stats.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The kernel's CUBIC (net/ipv4/tcp_cubic.c), which it offers to BPF congestion controls. */
extern void cubictcp_init(struct sock *sk) __ksym;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym;
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

/* RFC 7661's non-validated period. */
#define GFREP_CUBIC_KEEP_NS (300ull * 1000 * 1000 * 1000)

struct gfrep_cubic_stats gfrep_cubic_stats = {};

struct gfrep_cubic_keep {
  __u64 last_ack_ns; /* bpf_ktime_get_ns() at the latest ACK */
  __u32 cwnd;        /* noted at CA_EVENT_CWND_RESTART; 0: nothing to put back */
  __u32 ssthresh;
};

static __always_inline struct tcp_sock *tcp_of(struct sock *sk) { return (struct tcp_sock *)sk; }
static __always_inline struct gfrep_cubic_keep *keep_of(struct sock *sk) {
  return (struct gfrep_cubic_keep *)&((struct inet_connection_sock *)sk)->icsk_ca_priv[11];
}

SEC("struct_ops/gfrep_cubic_init")
void BPF_PROG(gfrep_cubic_init, struct sock *sk) {
  struct gfrep_cubic_keep *k = keep_of(sk);
  k->last_ack_ns = bpf_ktime_get_ns();
  k->cwnd = 0;
  k->ssthresh = 0;
  __sync_fetch_and_add(&gfrep_cubic_stats.sockets, 1);
  cubictcp_init(sk);
}

SEC("struct_ops/gfrep_cubic_ssthresh")
__u32 BPF_PROG(gfrep_cubic_ssthresh, struct sock *sk) { return cubictcp_recalc_ssthresh(sk); }

SEC("struct_ops/gfrep_cubic_cong_avoid")
void BPF_PROG(gfrep_cubic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked) {
  cubictcp_cong_avoid(sk, ack, acked);
}

SEC("struct_ops/gfrep_cubic_set_state")
void BPF_PROG(gfrep_cubic_set_state, struct sock *sk, __u8 new_state) { cubictcp_state(sk, new_state); }

SEC("struct_ops/gfrep_cubic_acked")
void BPF_PROG(gfrep_cubic_acked, struct sock *sk, const struct ack_sample *sample) {
  keep_of(sk)->last_ack_ns = bpf_ktime_get_ns();
  cubictcp_acked(sk, sample);
}

SEC("struct_ops/gfrep_cubic_undo_cwnd")
__u32 BPF_PROG(gfrep_cubic_undo_cwnd, struct sock *sk) { return tcp_reno_undo_cwnd(sk); }

SEC("struct_ops/gfrep_cubic_cwnd_event")
void BPF_PROG(gfrep_cubic_cwnd_event, struct sock *sk, enum tcp_ca_event ev) {
  struct tcp_sock *tp = tcp_of(sk);
  struct gfrep_cubic_keep *k = keep_of(sk);
  if (ev == CA_EVENT_CWND_RESTART) {
    if (bpf_ktime_get_ns() - k->last_ack_ns <= GFREP_CUBIC_KEEP_NS) {
      k->cwnd = tp->snd_cwnd;
      k->ssthresh = tp->snd_ssthresh;
    } else {
      k->cwnd = 0;
      __sync_fetch_and_add(&gfrep_cubic_stats.let_go, 1);
    }
    return;
  }
  if (ev == CA_EVENT_TX_START && k->cwnd != 0) {
    if (k->cwnd > tp->snd_cwnd) {
      gfrep_cubic_stats.last_kept = ((__u64)k->cwnd << 32) | tp->snd_cwnd;
      __u32 cwnd = k->cwnd < tp->snd_cwnd_clamp ? k->cwnd : tp->snd_cwnd_clamp;
      tp->snd_cwnd = cwnd;
      tp->snd_ssthresh = k->ssthresh;
      __sync_fetch_and_add(&gfrep_cubic_stats.kept, 1);
    }
    k->cwnd = 0;
  }
  cubictcp_cwnd_event(sk, ev);
}

SEC(".struct_ops")
struct tcp_congestion_ops gfrep_cubic = {
    .init = (void *)gfrep_cubic_init,
    .ssthresh = (void *)gfrep_cubic_ssthresh,
    .cong_avoid = (void *)gfrep_cubic_cong_avoid,
    .set_state = (void *)gfrep_cubic_set_state,
    .cwnd_event = (void *)gfrep_cubic_cwnd_event,
    .pkts_acked = (void *)gfrep_cubic_acked,
    .undo_cwnd = (void *)gfrep_cubic_undo_cwnd,
    .name = "gfrep_cubic",
};
