from collections import deque


def dijkstra(n, edges, src):
    adj = [[] for _ in range(n)]
    for u, v, w in edges:
        adj[u].append((v, w))
    dist = [float("inf")] * n
    dist[src] = 0
    queue = deque([src])
    while queue:
        u = queue.popleft()
        for v, w in adj[u]:
            if dist[v] == float("inf"):
                dist[v] = dist[u] + w
                queue.append(v)
    return dist
