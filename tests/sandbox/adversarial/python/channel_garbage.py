# task: python/two_sum
# expect: runtime | wrong_answer
# class: writes a frame header announcing 4 GiB, then garbage, to descriptor 3 (hardening: the judge's channel)
# feedback: broke the channel
import os

try:
    os.write(3, b"\xff\xff\xff\xff" + b"\x00" * 4096)
except OSError:
    pass


def two_sum(nums, target):
    return None
