"""CRC-32 of a concatenation from the CRCs of its parts (zlib's ``crc32_combine``).

Python's :mod:`zlib` computes a CRC-32 by reading every byte. An append delta knows the
CRC of the list it extends and of the bytes it adds, but its stored checksum covers the
whole payload behind a new array header: :func:`crc32_combine` gives that CRC in
O(log n) work instead of a pass over n bytes, so a put costs what it adds.

The method is zlib's: appending ``n`` zero bytes to a message is a linear map on the
CRC register (a 32x32 matrix over GF(2)); the maps for 2**i zero bytes are computed once,
and ``n``'s set bits pick which ones to apply. Each map is applied by four table lookups
(one per byte of the register), its tables built the first time it is needed: about 6 µs
a combine where a loop over the register's bits took about 34.
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

Tables = tuple[list[int], list[int], list[int], list[int]]
# per operator, once used: its image of every value of each byte of the register, so
# applying it takes four lookups instead of a loop over 32 bits
_TABLES: list[Tables | None] = [None] * len(_ZERO_BYTES)


def _tables(matrix: Matrix) -> Tables:
    made = []
    for byte in range(4):
        columns = matrix[8 * byte : 8 * byte + 8]
        table = [0] * 256
        for value in range(1, 256):
            lowest = value & -value  # linear: the image of value is the image of its
            table[value] = table[value ^ lowest] ^ columns[lowest.bit_length() - 1]
        made.append(table)
    return made[0], made[1], made[2], made[3]


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """``zlib.crc32(a + b)``, given ``crc1 = zlib.crc32(a)``, ``crc2 = zlib.crc32(b)`` and
    ``length2 = len(b)``."""
    bit = 0
    while length2:
        if length2 & 1:
            tables = _TABLES[bit]
            if tables is None:
                tables = _TABLES[bit] = _tables(_ZERO_BYTES[bit])
            t0, t1, t2, t3 = tables
            crc1 = t0[crc1 & 255] ^ t1[(crc1 >> 8) & 255] ^ t2[(crc1 >> 16) & 255] ^ t3[crc1 >> 24]
        length2 >>= 1
        bit += 1
    return crc1 ^ crc2
