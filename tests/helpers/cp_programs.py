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
