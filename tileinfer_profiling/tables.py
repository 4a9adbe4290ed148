"""DataFrames as a report shows them: units in the headers, numbers formatted by what the column holds,
wide or long tables in a scrolling box.

    from tileinfer_profiling.tables import table
    table(df, caption="Recorded on the H200")          # displays in a notebook (_repr_html_)

A column's kind comes from its name (`prefill_ms` is milliseconds, `of_floor` a fraction, `steps` a
count); `formats` and `labels` override it per column.
"""

import html
import re
from dataclasses import dataclass

import pandas as pd

from tileinfer_profiling import fmt

# name pattern -> (unit shown in the header, formatter); the first match wins
_KINDS = [
    (r"(^|_)(pct)$", "%", fmt.sig),
    (r"(^|_)(fraction|share|of_floor|frac_.*)$|^frac_|^of_", None, fmt.pct),
    (r"^(vs_|speedup)|_over_|_vs_", None, fmt.times),
    (r"_ms$|^ms_|_ms_", "ms", fmt.sig),
    (r"_us$|^us$", "µs", fmt.sig),
    (r"tok_s$", "tok/s", fmt.sig),
    (r"(^|_)gbs$", "GB/s", fmt.sig),
    (r"_gb$|^gb_|_GB_", "GB", fmt.sig),
    (r"bytes$", None, fmt.nbytes),
    (r"^(steps|prompt_tokens|new_tokens|num_splits|best_num_splits|kv_len|q_len|m|n|k|regs|calls|rows|"
     r"blocks_per_sm|num_warps|num_stages|layer|chunk|block_size|loop_instructions|trials|process)$", None, fmt.integer),
]
_UNIT_SUFFIX = re.compile(r"_(ms|us|tok_s|gbs|gb|pct)$")
_UNIT_LABEL = {"ms": "ms", "us": "µs", "tok_s": "tok/s", "gbs": "GB/s", "gb": "GB", "pct": "%"}


def column_kind(name):
    """(unit or None, formatter) for a column name."""
    for pattern, unit, formatter in _KINDS:
        if re.search(pattern, str(name)):
            return unit, formatter
    return None, fmt.plain


def label(name):
    """A header from a column name: "decode_tok_s" -> "decode (tok/s)", "of_floor" -> "of floor"."""
    name = str(name)
    m = _UNIT_SUFFIX.search(name)
    if m:
        stem = name[:m.start()].replace("_", " ")
        return f"{stem} ({_UNIT_LABEL[m.group(1)]})"
    if name.endswith("tok_s"):
        return "tok/s"
    return name.replace("_", " ")


@dataclass
class Table:
    """A formatted table: `frame` holds the text of every cell, `html` the page's markup."""
    frame: pd.DataFrame
    html: str

    def _repr_html_(self):
        return self.html


def _cell(formatter, value):
    try:
        return formatter(value)
    except (TypeError, ValueError):  # text in a numeric column ("-", a note): shown as it is
        return str(value)


def formatted(df, formats=None, labels=None, index=False):
    """The cells of `df` as text (`formats`: {column: callable}), headers from `labels` or the names."""
    formats, labels = formats or {}, labels or {}
    df = df.reset_index() if index else df
    out = pd.DataFrame(index=range(len(df)))
    for col in df.columns:
        formatter = formats.get(col) or column_kind(col)[1]
        out[labels.get(col, label(col))] = [_cell(formatter, v) for v in df[col].tolist()]
    return out


def table(df, caption=None, formats=None, labels=None, index=False, max_height=420, note=None):
    """A `Table` of `df`: formatted cells, a caption above, an optional note below; more than a screen of
    rows or columns scrolls inside its box instead of being clipped."""
    if df is None or not len(df):
        body = "<p><em>no rows</em></p>"
        frame = pd.DataFrame()
    else:
        frame = formatted(df, formats, labels, index)
        body = frame.to_html(index=False, escape=True, border=0, classes="dataframe ti-table")
    parts = []
    if caption:
        parts.append(f'<p class="ti-caption"><strong>{html.escape(caption)}</strong></p>')
    parts.append(f'<div class="ti-scroll" style="overflow:auto; max-height:{int(max_height)}px; max-width:100%">'
                 f"{body}</div>")
    if note:
        parts.append(f'<p class="ti-note"><em>{html.escape(note)}</em></p>')
    return Table(frame, "\n".join(parts))


def stack(*tables):
    """Several `Table`s shown one after another (the first's frame kept for inspection)."""
    tables = [t for t in tables if t is not None]
    return Table(tables[0].frame if tables else pd.DataFrame(), "\n".join(t.html for t in tables))


def split(df, keys, groups, captions, **kwargs):
    """A wide table as several narrower ones: each shows `keys` then one list of `groups`, under its caption."""
    parts = []
    for cols, caption in zip(groups, captions):
        cols = [c for c in cols if c in df.columns]
        if cols:
            parts.append(table(df[[k for k in keys if k in df.columns] + cols], caption=caption, **kwargs))
    return stack(*parts)
