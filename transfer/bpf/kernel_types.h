/* The few kernel types highspeed.bpf.c touches, declared with CO-RE relocations
 * (preserve_access_index): libbpf moves every field access to the running kernel's offsets
 * from its BTF (/sys/kernel/btf/vmlinux) at load time. So the build needs no vmlinux.h from
 * the build machine's kernel, and one object runs on every kernel with BTF and BPF
 * congestion controls (Linux >= 5.13 for the kfunc-free programs used here).
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

#pragma clang attribute pop

/* Matched to the kernel's struct by member name when libbpf registers the ops (the layout here
 * is not the kernel's and need not be). */
struct tcp_congestion_ops {
  __u32 (*ssthresh)(struct sock *sk);
  void (*cong_avoid)(struct sock *sk, __u32 ack, __u32 acked);
  __u32 (*undo_cwnd)(struct sock *sk);
  void (*init)(struct sock *sk);
  char name[16];
};

#endif /* GFREP_TRANSFER_BPF_KERNEL_TYPES_H_ */
