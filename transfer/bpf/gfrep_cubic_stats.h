/* What gfrep_cubic.bpf.c counts, over every socket using it (its global `gfrep_cubic_stats`,
 * read by the loader through the skeleton's .bss). Plain C, no includes: the BPF build and
 * the C++ loader both include it. */
#ifndef GFREP_TRANSFER_BPF_GFREP_CUBIC_STATS_H_
#define GFREP_TRANSFER_BPF_GFREP_CUBIC_STATS_H_

struct gfrep_cubic_stats {
  unsigned long long sockets;   /* connections that ran it */
  unsigned long long kept;      /* restarts after idle undone: the window kept */
  unsigned long long let_go;    /* restarts left alone: idle longer than the non-validated period */
  unsigned long long last_kept; /* (kept window << 32) | what the restart had made of it */
};

#endif /* GFREP_TRANSFER_BPF_GFREP_CUBIC_STATS_H_ */
