"""Solutions to the exercises of notebook 05 (the radix cache)."""


def match_1():
    return 4  # [1, 2, 3] on the shared edge, then 7 on the second branch; 9 differs from 8


def match_2():
    return 4  # 6 tokens agree, but only the first whole page of 4 can be shared


def victim():
    return "B"  # A was touched after C was inserted; B has the oldest access


def sizes():
    # the path [1, 2, 3] -> [7, 8] is locked (5 tokens); the leaf [4, 5, 6] stays evictable
    return (3, 5)
