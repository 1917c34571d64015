#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
/* What the lab guests' emulated CPU (QEMU's TCG) charges for each kind of control transfer,
   hot (functions called in a loop). Each function runs 512 statements of one kind; each
   statement mixes a pseudo-random value (xorshift: six ALU operations) and then
     straight  adds a constant: no branch
     near      branches over one instruction on the value's low bit (a conditional branch
               within the same 4 KiB page, taken about half the time)
     far       does the same as an if/else whose rare side the compiler puts at the end of
               the function, 4 KiB or more away (taken about half the time here: a jump to
               another page and one back)
     call      calls a function on another page, which returns
   QEMU chains a translated block to the next one only within a guest page; a jump to
   another page, and every return, looks its target up instead. Figures only; not part of
   any test. Build: cc -O1 -static -o tcg_cost tests/lab/tcg_cost.c; run in a lab guest
   and on the host: tcg_cost [CALLS] (default 2000). Prints ns per statement of each kind
   and the excess over straight. SPDX-License-Identifier: MIT OR Apache-2.0 */
static volatile unsigned sink;
#define MIX b ^= b << 13; b ^= b >> 17; b ^= b << 5;
#define STRAIGHT MIX b += 0x9e3779b9u;
#define NEAR MIX __asm__ volatile("test $1, %0\n\tje 1f\n\tadd $0x9e3779b9, %0\n1:" : "+r"(b));
#define FAR MIX if (__builtin_expect(b & 1, 1)) { b += 0x9e3779b9u; } else { b -= 0x7f4a7c15u; __asm__ volatile(""); }
#define CALL MIX b = other_page(b);
#define X4(s) s s s s
#define X512(s) X4(X4(X4(X4(s s))))
enum { STATEMENTS = 512 };
__attribute__((noinline, section(".text.other_page"))) unsigned other_page(unsigned b) { return b * 3 + 1; }
static __attribute__((noinline)) unsigned straight(unsigned b) { X512(STRAIGHT) return b; }
static __attribute__((noinline)) unsigned near(unsigned b) { X512(NEAR) return b; }
static __attribute__((noinline)) unsigned far(unsigned b) { X512(FAR) return b; }
static __attribute__((noinline)) unsigned call(unsigned b) { X512(CALL) return b; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
/* ns per statement of f, over n calls (after one to translate it). */
static double run(unsigned (*f)(unsigned), int n) {
    unsigned b = 12345;
    b = f(b);
    double t0 = now();
    for (int i = 0; i < n; i++) b = f(b);
    sink = b;
    return (now() - t0) / n / STATEMENTS;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    if (n <= 0) { fprintf(stderr, "usage: %s [CALLS]\n", argv[0]); return 2; }
    double s = run(straight, n), nb = run(near, n), fb = run(far, n), c = run(call, n);
    printf("ns per statement: straight %.1f; near branch %.1f (+%.1f); far branch %.1f (+%.1f); call and return %.1f (+%.1f)\n",
           s, nb, nb - s, fb, fb - s, c, c - s);
    return 0;
}
