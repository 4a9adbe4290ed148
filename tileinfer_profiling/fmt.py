"""Numbers as a reader wants them: three significant digits, thousands separated, integers as integers,
fractions as percentages, times in the unit that keeps them short. `sig` keeps trailing zeros (a table's
column); the formatters with a unit drop them (prose).

    fmt.ms(3456.759541)   -> "3,457 ms"
    fmt.pct(0.2810)       -> "28.1 %"
    fmt.integer(16.0)     -> "16"
"""

import math

NA = "—"


def _missing(x):
    if isinstance(x, str) and not x.strip():
        return True
    try:
        return x is None or math.isnan(float(x))
    except (TypeError, ValueError):
        return False


def sig(x, digits=3):
    """`x` to `digits` significant digits (never fewer than its integer digits), with thousands separators."""
    if _missing(x):
        return NA
    x = float(x)
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{x:,.{decimals}f}"
    return "0" if text in ("-0", "-0.0") else text


def num(x, digits=3):
    """`sig` without trailing zeros, for prose: 9.80 -> "9.8", 16.0 -> "16"."""
    text = sig(x, digits)
    return text.rstrip("0").rstrip(".") if "." in text else text


def integer(x):
    """A count: 16.0 -> "16", 1024 -> "1,024"."""
    if _missing(x):
        return NA
    return f"{int(round(float(x))):,}"


def pct(fraction, digits=3):
    """A fraction as a percentage: 0.281 -> "28.1 %"."""
    if _missing(fraction):
        return NA
    return f"{num(100 * float(fraction), digits)} %"


def times(x):
    """A ratio: 1.357 -> "1.36×"."""
    return NA if _missing(x) else f"{num(x)}×"


def ms(x):
    """Milliseconds: 3456.76 -> "3,457 ms"; below 1 ms in µs, at 10 s and above in s."""
    if _missing(x):
        return NA
    x = float(x)
    if abs(x) >= 10_000:
        return f"{num(x / 1e3)} s"
    if 0 < abs(x) < 1:
        return f"{num(x * 1e3)} µs"
    return f"{num(x)} ms"


def us(x):
    """Microseconds: 16.21 -> "16.2 µs"; at 1,000 µs and above in ms."""
    if _missing(x):
        return NA
    return ms(float(x) / 1e3) if abs(float(x)) >= 1000 else f"{num(x)} µs"


def rate(tok_s):
    """Tokens per second: 1755.6 -> "1,756 tok/s"."""
    return NA if _missing(tok_s) else f"{num(tok_s)} tok/s"


def bandwidth(gbs):
    """GB/s: 3276.8 -> "3.28 TB/s"; 282.9 -> "283 GB/s"."""
    if _missing(gbs):
        return NA
    return f"{num(float(gbs) / 1e3)} TB/s" if abs(float(gbs)) >= 1000 else f"{num(gbs)} GB/s"


def nbytes(n):
    """Bytes: 777912320 -> "778 MB"."""
    if _missing(n):
        return NA
    n = float(n)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{num(n / scale)} {unit}"
    return f"{integer(n)} B"


def plain(x):
    """A value as text: numbers to three significant digits, integral floats as integers, text as is."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return integer(x)
    if isinstance(x, float):
        if _missing(x):
            return NA
        return integer(x) if x.is_integer() and abs(x) < 1e15 else sig(x)
    return NA if x is None else str(x)
