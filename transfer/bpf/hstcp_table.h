/* HighSpeed TCP's response function as a table (RFC 3649, Appendix B).
 *
 * Row i covers congestion windows w with rows[i-1].cwnd < w <= rows[i].cwnd (row 0: w <= 38,
 * the RFC's Low_Window, below which HighSpeed TCP is Standard TCP). In that range the window
 * grows by a(w) = i + 1 segments per window of ACKed data and, on a loss, shrinks by
 * b(w) = md / 256 of itself. Above the last row the last row's a and b hold.
 *
 * Shared by the BPF program (highspeed.bpf.c), its loader and the C++ test that checks the table against
 * the RFC's formulas (tests/transfer/highspeed_test.cc). Plain C, no includes: the BPF build
 * sees no libc.
 */
#ifndef GFREP_TRANSFER_BPF_HSTCP_TABLE_H_
#define GFREP_TRANSFER_BPF_HSTCP_TABLE_H_

#define GFREP_HSTCP_ROWS 72
#define GFREP_HSTCP_LOW_WINDOW 38

struct gfrep_hstcp_row {
  unsigned int cwnd; /* upper end of the row's window range, segments */
  unsigned int md;   /* b(w) * 256 */
};

/* w and b(w) as RFC 3649 tabulates them (b to two places there, to 1/256 here). */
static const struct gfrep_hstcp_row gfrep_hstcp_rows[GFREP_HSTCP_ROWS] = {
    {38, 128},    {118, 112},   {221, 104},   {347, 98},    {495, 93},    {663, 89},
    {851, 86},    {1058, 83},   {1284, 81},   {1529, 78},   {1793, 76},   {2076, 74},
    {2378, 72},   {2699, 71},   {3039, 69},   {3399, 68},   {3778, 66},   {4177, 65},
    {4596, 64},   {5036, 62},   {5497, 61},   {5979, 60},   {6483, 59},   {7009, 58},
    {7558, 57},   {8130, 56},   {8726, 55},   {9346, 54},   {9991, 53},   {10661, 52},
    {11358, 52},  {12082, 51},  {12834, 50},  {13614, 49},  {14424, 48},  {15265, 48},
    {16137, 47},  {17042, 46},  {17981, 45},  {18955, 45},  {19965, 44},  {21013, 43},
    {22101, 43},  {23230, 42},  {24402, 41},  {25618, 41},  {26881, 40},  {28193, 39},
    {29557, 39},  {30975, 38},  {32450, 38},  {33986, 37},  {35586, 36},  {37253, 36},
    {38992, 35},  {40808, 35},  {42707, 34},  {44694, 33},  {46776, 33},  {48961, 32},
    {51258, 32},  {53677, 31},  {56230, 30},  {58932, 30},  {61799, 29},  {64851, 28},
    {68113, 28},  {71617, 27},  {75401, 26},  {79517, 26},  {84035, 25},  {89053, 24},
};

/* What the BPF program counts, over every socket using it (its global `gfrep_hstcp_stats`,
 * read by the loader through the skeleton's .bss). */
struct hstcp_stats {
  unsigned long long sockets;        /* sockets that selected the algorithm */
  unsigned long long reductions;     /* ssthresh calls: losses and ECN marks */
  unsigned long long undos;          /* spurious reductions undone */
  unsigned long long last_reduction; /* (cwnd << 32) | ssthresh of the latest reduction */
  unsigned int max_row;              /* highest table row a window reached in congestion avoidance */
  unsigned int max_cwnd;             /* largest window that grew (slow start or avoidance) */
};

/* The row whose range holds `cwnd`: the first row with cwnd <= rows[i].cwnd, else the last.
 * A binary search of fixed depth (2^7 > 72 rows), which the BPF verifier walks in a few
 * hundred instructions. */
static inline unsigned int gfrep_hstcp_row_of(unsigned int cwnd) {
  unsigned int lo = 0, hi = GFREP_HSTCP_ROWS - 1; /* the answer is in [lo, hi] */
  int step;
  for (step = 0; step < 7; step++) {
    unsigned int mid = (lo + hi) / 2;
    if (lo >= hi || mid >= GFREP_HSTCP_ROWS) break;
    if (cwnd <= gfrep_hstcp_rows[mid].cwnd) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

/* The window after a loss at `cwnd` (RFC 3649: w - b(w) * w, at least 2 segments). */
static inline unsigned int gfrep_hstcp_reduced(unsigned int cwnd) {
  unsigned int row = gfrep_hstcp_row_of(cwnd);
  unsigned long long cut = ((unsigned long long)cwnd * gfrep_hstcp_rows[row].md) >> 8;
  unsigned int next = cwnd - (unsigned int)cut;
  return next < 2 ? 2 : next;
}

#endif /* GFREP_TRANSFER_BPF_HSTCP_TABLE_H_ */
