"""IPython extension of the python kernels: E2B's extra result formats.

Loaded by each python context (--IPKernelApp.extensions=space_display). It
adds two display formats the code-interpreter SDKs read from a result:

  e2b/chart  for a matplotlib Figure: the chart's data (charts.py), next to
             the PNG the inline backend renders;
  e2b/data   for a pandas DataFrame: its columns as lists, next to its
             text and HTML.

Both match their class by name (pandas is imported by user code only).
"""

import json
import os

from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode


class _TypeNameFormatter(BaseFormatter):
    """Formats instances of one class, named by module and name.

    The class is matched at each call rather than registered with
    for_type: matplotlib's inline backend clears every formatter's entry
    for Figure when it sets its own up (select_figure_formats)."""

    module = ""
    name = ""

    def convert(self, obj):
        raise NotImplementedError

    def __call__(self, obj):
        if not self.enabled:
            return None
        for cls in type(obj).__mro__:
            if cls.__name__ == self.name and cls.__module__ == self.module:
                try:
                    return self.convert(obj)
                except Exception:  # noqa: BLE001 - the other formats still show it
                    return None
        return None


class _ChartFormatter(_TypeNameFormatter):
    format_type = Unicode("e2b/chart")
    print_method = ObjectName("_repr_e2b_chart_")
    _return_type = dict
    module, name = "matplotlib.figure", "Figure"

    def convert(self, fig):
        import charts

        return charts.figure_to_chart(fig)


class _DataFormatter(_TypeNameFormatter):
    format_type = Unicode("e2b/data")
    print_method = ObjectName("_repr_e2b_data_")
    _return_type = dict
    module, name = "pandas.core.frame", "DataFrame"

    def convert(self, df):
        # to_json turns numpy scalars, NaN and timestamps into JSON.
        return json.loads(df.to_json(orient="columns", date_format="iso", default_handler=str))


def load_ipython_extension(ip):
    # The server put this directory on PYTHONPATH to load us; the user's
    # subprocesses should not inherit it.
    ours = os.environ.pop("SPACE_DISPLAY_PATH", None)
    if ours is not None and os.environ.get("PYTHONPATH") == ours:
        del os.environ["PYTHONPATH"]
    formatters = ip.display_formatter.formatters
    for cls in (_ChartFormatter, _DataFormatter):
        f = cls(parent=ip.display_formatter)
        formatters[f.format_type] = f
    # The inline backend, set up now: left to MPLBACKEND, matplotlib 3.6
    # and matplotlib-inline 0.1.6 configure it only after the first cell
    # that uses pyplot, whose figures then lack their PNG. This imports
    # pyplot (under a second), in the kernel's start rather than a cell.
    try:
        ip.run_line_magic("matplotlib", "inline")
    except Exception:  # noqa: BLE001 - no matplotlib: no charts
        pass
