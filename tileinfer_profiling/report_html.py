"""An executed report notebook as a page to read: no code, no stderr boxes, the findings first.

The notebook computes its findings last (they need every section's tables); cells tagged `findings`
move up to just after the title here. Code inputs and prompts are hidden, stderr streams (library
warnings, progress bars) are dropped, and plotly.js comes in once, with the first figure.

    html = report_html(nbformat.read(path, as_version=4))
"""

import copy
import re

FINDINGS_TAG = "findings"
# nbconvert's page and plotly's notebook renderer fetch require.js and MathJax from a CDN; the report needs
# neither (plotly.js is inline, no cell has LaTeX), so the page makes no request at all.
_CDN_SCRIPTS = [re.compile(r'<script src="https://cdnjs\.cloudflare\.com/ajax/libs/(require\.js|mathjax)/[^"]*"></script>\s*'),
                re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->\s*", re.S)]
STYLE = """<style>
body { max-width: 1180px; margin: 0 auto; }
.jp-Cell-inputWrapper:empty, .jp-Cell:has(.jp-Cell-outputWrapper:empty) { display: none; }
.ti-scroll table.ti-table { font-size: 12.5px; }
.ti-scroll table.ti-table th { position: sticky; top: 0; background: #f4f4f4; }
.ti-scroll table.ti-table td:first-child, .ti-scroll table.ti-table th:first-child { text-align: left; }
.ti-caption { margin-bottom: 4px; }
.ti-note { color: #555; font-size: 12.5px; margin-top: 4px; }
</style>
"""


def _tags(cell):
    return cell.get("metadata", {}).get("tags", [])


def arrange(book):
    """A copy of `book` as the page shows it: stderr streams removed from every output, and the cells
    tagged `findings` moved to just after the first markdown cell."""
    book = copy.deepcopy(book)
    for cell in book.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", [])
                            if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
    findings = [c for c in book.cells if FINDINGS_TAG in _tags(c)]
    rest = [c for c in book.cells if FINDINGS_TAG not in _tags(c)]
    first_md = next((i for i, c in enumerate(rest) if c.cell_type == "markdown"), -1)
    book.cells = rest[:first_md + 1] + findings + rest[first_md + 1:]
    return book


def report_html(book, title="TileInfer report"):
    """The page: nbconvert's lab template with inputs and prompts hidden, on the arranged notebook."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True)
    book = arrange(book)
    book.metadata["title"] = title
    body, _ = exporter.from_notebook_node(book)
    for pattern in _CDN_SCRIPTS:
        body = pattern.sub("", body)
    return body.replace("</head>", STYLE + "</head>", 1)
