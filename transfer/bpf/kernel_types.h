/* The few kernel types gfrep's BPF congestion controls (highspeed.bpf.c, gfrep_cubic.bpf.c)
 * touch, declared with CO-RE relocations (preserve_access_index): libbpf moves every field
 * access to the running kernel's offsets from its BTF (/sys/kernel/btf/vmlinux) at load time.
 * So the build needs no vmlinux.h from the build machine's kernel, and one object runs on
 * every kernel with BTF and BPF congestion controls (Linux >= 5.13, which also lets
 * gfrep_cubic.bpf.c call the kernel's CUBIC).
 *
 * Only the members used are declared; the names are the kernel's.
 */
#ifndef GFREP_TRANSFER_BPF_KERNEL_TYPES_H_
#define GFREP_TRANSFER_BPF_KERNEL_TYPES_H_

/* The integer types libbpf's helper declarations use (no <linux/types.h>: no libc here). */
typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct sock {
  int placeholder; /* never read: the programs cast to tcp_sock, as the kernel's own CCs do */
};

struct inet_connection_sock {
  __u64 icsk_ca_priv[13]; /* the congestion control's per-socket state */
};

struct tcp_sock {
  __u32 snd_cwnd;        /* congestion window, segments */
  __u32 snd_cwnd_cnt;    /* ACKed segments counted towards the next +1 */
  __u32 snd_cwnd_clamp;  /* the window never grows past this */
  __u32 snd_ssthresh;    /* slow-start threshold */
  __u32 prior_cwnd;      /* window before the last reduction (undo) */
  __u32 max_packets_out; /* most segments in flight in the last window */
  __u8 is_cwnd_limited : 1;
};

/* What the kernel's TCP passes to a congestion control's pkts_acked (declared for the kfunc's
 * prototype; gfrep_cubic.bpf.c only hands it on). */
struct ack_sample {
  __u32 pkts_acked;
  __s32 rtt_us;
  __u32 in_flight;
};

#pragma clang attribute pop

/* The events a congestion control's cwnd_event receives (include/net/tcp.h). */
enum tcp_ca_event {
  CA_EVENT_TX_START,     /* first transmit when no packets are in flight */
  CA_EVENT_CWND_RESTART, /* the window is about to restart after idle */
  CA_EVENT_COMPLETE_CWR, /* end of a congestion window reduction */
  CA_EVENT_LOSS,         /* loss timeout */
  CA_EVENT_ECN_NO_CE,
  CA_EVENT_ECN_IS_CE,
};

/* Matched to the kernel's struct by member name when libbpf registers the ops (the layout here
 * is not the kernel's and need not be). */
struct tcp_congestion_ops {
  __u32 (*ssthresh)(struct sock *sk);
  void (*set_state)(struct sock *sk, __u8 new_state);
  void (*cwnd_event)(struct sock *sk, enum tcp_ca_event ev);
  void (*pkts_acked)(struct sock *sk, const struct ack_sample *sample);
  void (*cong_avoid)(struct sock *sk, __u32 ack, __u32 acked);
  __u32 (*undo_cwnd)(struct sock *sk);
  void (*init)(struct sock *sk);
  char name[16];
};

#endif /* GFREP_TRANSFER_BPF_KERNEL_TYPES_H_ */
