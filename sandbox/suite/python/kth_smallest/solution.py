import heapq


def kth_smallest(nums, k):
    if not 1 <= k <= len(nums):
        raise ValueError("k=%d out of range 1..%d" % (k, len(nums)))
    return heapq.nsmallest(k, nums)[-1]
