"""CRC-32 of a concatenation from the CRCs of its parts (zlib's ``crc32_combine``).

Python's :mod:`zlib` computes a CRC-32 by reading every byte. An append delta knows the
CRC of the list it extends and of the bytes it adds, but its stored checksum covers the
whole payload behind a new array header: :func:`crc32_combine` gives that CRC in
O(log n) work instead of a pass over n bytes, so a put costs what it adds.

The method is zlib's: appending ``n`` zero bytes to a message is a linear map on the
CRC register (a 32x32 matrix over GF(2)); the maps for 2**i zero bytes are computed once,
and ``n``'s set bits pick which ones to apply.
"""

from __future__ import annotations

__all__ = ["crc32_combine"]

_POLYNOMIAL = 0xEDB88320  # CRC-32's, reflected (as zlib uses it)

Matrix = tuple[int, ...]  # 32 columns: the image of each bit of the register


def _times(matrix: Matrix, vector: int) -> int:
    total, bit = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[bit]
        vector >>= 1
        bit += 1
    return total


def _square(matrix: Matrix) -> Matrix:
    return tuple(_times(matrix, column) for column in matrix)


def _zero_byte_operators(count: int) -> tuple[Matrix, ...]:
    """The operators that append 2**i zero bytes, for i < ``count``."""
    one_bit: Matrix = (_POLYNOMIAL, *(1 << n for n in range(31)))  # one zero bit
    operator = _square(_square(_square(one_bit)))  # 8 zero bits
    operators = [operator]
    for _ in range(count - 1):
        operator = _square(operator)
        operators.append(operator)
    return tuple(operators)


_ZERO_BYTES = _zero_byte_operators(64)


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """``zlib.crc32(a + b)``, given ``crc1 = zlib.crc32(a)``, ``crc2 = zlib.crc32(b)`` and
    ``length2 = len(b)``."""
    bit = 0
    while length2:
        if length2 & 1:
            crc1 = _times(_ZERO_BYTES[bit], crc1)
        length2 >>= 1
        bit += 1
    return crc1 ^ crc2
