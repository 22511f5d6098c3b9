from collections import deque


def sliding_window_max(nums, k):
    if k <= 0 or k > len(nums):
        return []
    window = deque()  # indices whose values decrease from front to back
    out = []
    for i, v in enumerate(nums):
        while window and nums[window[-1]] <= v:
            window.pop()
        window.append(i)
        if window[0] <= i - k:
            window.popleft()
        if i >= k - 1:
            out.append(nums[window[0]])
    return out
