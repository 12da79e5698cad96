"""Our own Python solutions of Library Checker problems, shared by the judge's tests and the package builds."""

MIS_PY = '''import sys


def main():
    data = sys.stdin.read().split()
    n, m = int(data[0]), int(data[1])
    adj = [0] * n
    for k in range(m):
        u, v = int(data[2 + 2 * k]), int(data[3 + 2 * k])
        if u != v:
            adj[u] |= 1 << v
            adj[v] |= 1 << u
    best = [0, 0]

    def grow(rest, chosen, size):
        if rest == 0:
            if size > best[0]:
                best[0], best[1] = size, chosen
            return
        if size + bin(rest).count("1") <= best[0]:
            return
        low = rest & -rest
        v = low.bit_length() - 1
        grow(rest & ~low & ~adj[v], chosen | low, size + 1)
        if bin(adj[v] & rest).count("1") > 1:  # a vertex of degree 0 or 1 is in some maximum set
            grow(rest & ~low, chosen, size)

    grow((1 << n) - 1, 0, 0)
    picked = [v for v in range(n) if best[1] >> v & 1]
    print(len(picked))
    print(*reversed(picked))  # another order than the jury's: only the checker accepts it


main()
'''

# discrete_logarithm_mod: the least K >= 0 with X^K = Y (mod M), or -1 (0^0 = 1). K under 32 is tried directly;
# beyond it X^K is 0 modulo the part g of M made of X's primes (no exponent in M reaches 32), so Y must be too,
# and the rest is a baby-step giant-step search modulo M / g, where X is invertible.
DLOG_PY = '''import math
import sys


def dlog(x, y, m, first=0):
    x, y = x % m, y % m
    e = pow(x, first, m)
    for k in range(first, 32):
        if e == y:
            return k
        e = e * x % m
    g = math.gcd(e, m)
    if y % g:
        return -1
    m //= g
    if m == 1:
        return 32
    target = y * pow(e, -1, m) % m  # X^j = target (mod m), K = 32 + j
    n = math.isqrt(m) + 1
    baby, p = {}, 1
    for b in range(n):
        baby.setdefault(p, b)
        p = p * x % m
    giant = pow(p, -1, m)
    for a in range(n):
        b = baby.get(target)
        if b is not None:
            return 32 + a * n + b
        target = target * giant % m
    return -1


def main():
    data = sys.stdin.buffer.read().split()
    out = []
    for i in range(int(data[0])):
        x, y, m = map(int, data[1 + 3 * i : 4 + 3 * i])
        out.append(dlog(x, y, m, FIRST))
    print("\\n".join(map(str, out)))


FIRST = 0
main()
'''
# Wrong: it starts at K = 1 (a Y of 1, or anything modulo 1, gets a larger K than 0: not the least).
DLOG_FROM_ONE_PY = DLOG_PY.replace("FIRST = 0", "FIRST = 1")

# factorize, wrong: trial division to 1000, and whatever is left taken for a prime.
FACTORIZE_TRIAL_PY = '''import sys

data = sys.stdin.buffer.read().split()
for a in data[1 : 1 + int(data[0])]:
    n, f, p = int(a), [], 2
    while p <= 1000 and p * p <= n:
        while n % p == 0:
            f.append(p)
            n //= p
        p += 1
    if n > 1:
        f.append(n)
    print(len(f), *f)
'''

# A C++ program made of a jury solution and a transformation of its answer: put before the jury's source (its
# main unchanged), a constructor runs the jury's program in a child process whose stdout is a pipe, reads the
# answer, reads the test's input again (the sandbox's stdin is a file) and prints ``transform(input, answer)``:
# another valid output (the checker must accept it although its bytes differ from the answer file) or an
# invalid one (the checker must reject it). Every token of these problems is an integer.
_WRAPPER = r"""#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace answer_transform {  // apart from the jury's names
typedef std::vector<long long> Tokens;

static Tokens read_tokens(int fd) {
  std::string text;
  char buf[1 << 16];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, n);
  Tokens out;
  const char *p = text.c_str();
  for (char *end;; p = end) {
    long long v = strtoll(p, &end, 10);
    if (end == p) return out;
    out.push_back(v);
  }
}

static long long power(long long a, long long e, long long m) {
  long long r = 1 % m;
  for (a %= m; e > 0; e >>= 1, a = a * a % m)
    if (e & 1) r = r * a % m;
  return r;
}

static long long gcd(long long a, long long b) { return b ? gcd(b, a % b) : a; }

static void transform(const Tokens &input, const Tokens &answer) {
BODY}
}  // namespace answer_transform

__attribute__((constructor)) static void run_the_jury_in_a_child() {
  int fds[2];
  if (pipe(fds) != 0) abort();
  pid_t child = fork();
  if (child < 0) abort();
  if (child == 0) {  // the jury's main runs here
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    return;
  }
  close(fds[1]);
  answer_transform::Tokens answer = answer_transform::read_tokens(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) _exit(1);
  lseek(0, 0, SEEK_SET);
  answer_transform::transform(answer_transform::read_tokens(0), answer);
  fflush(stdout);
  _exit(0);
}

"""

# Per checker-needing problem: (another valid output, an invalid one), as the body of ``transform``.
TRANSFORMS = {
    # the roots in reverse order, one a line; one root moved by one (the multiset differs)
    "polynomial_root_finding": (r"""  printf("%lld\n", answer[0]);
  for (size_t i = answer.size(); i-- > 1;) printf("%lld\n", answer[i]);
""", r"""  for (size_t i = 0; i < answer.size(); i++) printf("%lld ", i == 1 ? (answer[i] + 1) % 998244353 : answer[i]);
  printf("\n");
"""),
    # the tree's edges in reverse order; the last edge left out, the weight kept (the sum no longer matches)
    "minimum_steiner_tree": (r"""  printf("%lld %lld\n", answer[0], answer[1]);
  for (size_t i = answer.size(); i-- > 2;) printf("%lld ", answer[i]);
  printf("\n");
""", r"""  long long z = answer[1] > 0 ? answer[1] - 1 : 0;
  printf("%lld %lld\n", answer[0], z);
  for (long long i = 0; i < z; i++) printf("%lld ", answer[2 + i]);
  printf("\n");
"""),
    # another root X * w where there is one: w = a^((P-1)/d), d = gcd(K, P-1) (P-1 for K = 0), is a K-th root
    # of unity, and not 1 for some small a when d > 1; no root at all (-1) for every case
    "kth_root_mod": (r"""  for (long long i = 0; i < input[0]; i++) {
    long long k = input[1 + 3 * i], p = input[3 + 3 * i], x = answer[i], d = gcd(k, p - 1);
    for (long long a = 2; x > 0 && d > 1 && a < p; a++) {
      long long w = power(a, (p - 1) / d, p);
      if (w != 1) {
        x = x * w % p;
        break;
      }
    }
    printf("%lld\n", x);
  }
""", r"""  for (long long i = 0; i < input[0]; i++) printf("-1\n");
"""),
    # the coefficients one a line; the first coefficient moved by one (the recurrence no longer holds)
    "find_linear_recurrence": (r"""  for (long long v : answer) printf("%lld\n", v);
""", r"""  for (size_t i = 0; i < answer.size(); i++) printf("%lld ", i == 1 ? (answer[i] + 1) % 998244353 : answer[i]);
  printf("\n");
"""),
}


def transformed(jury_source: str, body: str) -> str:
    """A C++ program printing ``body``'s transformation of what ``jury_source`` prints (``_WRAPPER``)."""
    return _WRAPPER.replace("BODY", body, 1) + jury_source
