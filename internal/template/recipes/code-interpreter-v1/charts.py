"""Chart data from matplotlib figures, in the shape E2B's SDKs read.

The code-interpreter SDKs expose `result.chart` (JS) / `result.chart`
(Python) for a displayed figure: a JSON object with a type (line, scatter,
bar, pie, box_and_whisker, superchart, unknown), a title and elements, plus
axis metadata for 2D charts. This module derives that object from the
figure's artists after a draw, so tick labels are final. It knows only
matplotlib; anything it cannot classify is type "unknown" with no elements
(the PNG is still there).

figure_to_chart(fig) returns the dict, or None for a figure without axes.
"""

import datetime
import math
import re

from matplotlib import category, dates
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.lines import Line2D
from matplotlib.patches import PathPatch, Rectangle, Wedge
from matplotlib.text import Text

# "Time (s)" and "Speed [m/s]": the unit in the trailing brackets.
_UNIT = re.compile(r"[(\[]\s*([^()\[\]]+?)\s*[)\]]\s*$")


def _num(v):
    """A JSON-safe number (None for NaN and infinities)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if math.isnan(f) or math.isinf(f):
        return None
    if f.is_integer() and abs(f) < 2**53:
        return int(f)
    return f


def _round(v, places=6):
    f = _num(v)
    if isinstance(f, float):
        f = _num(round(f, places))
    return f


def _text_or_none(s):
    return s if s else None


def _unit(label):
    if not label:
        return None
    m = _UNIT.search(label)
    return m.group(1) if m else None


def _axis_kind(axis, scale):
    """linear, log, ... as matplotlib names the scale, or datetime and
    categorical for axes with date or string units."""
    conv = getattr(axis, "converter", None)
    if conv is None and hasattr(axis, "get_converter"):
        conv = axis.get_converter()
    if isinstance(conv, category.StrCategoryConverter):
        return "categorical"
    date_types = tuple(t for t in (getattr(dates, "DateConverter", None),
                                   getattr(dates, "_SwitchableDateConverter", None),
                                   getattr(dates, "ConciseDateConverter", None)) if t)
    if date_types and isinstance(conv, date_types):
        return "datetime"
    return scale


def _decoder(axis, kind):
    """Turns an axis's internal float back into what the user plotted."""
    if kind == "datetime":
        def dt(v):
            try:
                d = dates.num2date(float(v))
            except (ValueError, OverflowError):
                return None
            if d.tzinfo is not None:
                d = d.astimezone(datetime.timezone.utc).replace(tzinfo=None)
            return d.isoformat()
        return dt
    if kind == "categorical":
        mapping = getattr(getattr(axis, "units", None), "_mapping", None) or {}
        names = {v: k for k, v in mapping.items()}

        def cat(v):
            f = _num(v)
            return names.get(f, f)
        return cat
    return _num


def _chart2d(ax, kind):
    x_label, y_label = ax.get_xlabel(), ax.get_ylabel()
    return {
        "type": kind,
        "title": ax.get_title(),
        "x_label": _text_or_none(x_label),
        "y_label": _text_or_none(y_label),
        "x_unit": _unit(x_label),
        "y_unit": _unit(y_label),
        "elements": [],
    }


def _point_chart(ax, kind):
    chart = _chart2d(ax, kind)
    x_kind = _axis_kind(ax.xaxis, ax.get_xscale())
    y_kind = _axis_kind(ax.yaxis, ax.get_yscale())
    fx, fy = _decoder(ax.xaxis, x_kind), _decoder(ax.yaxis, y_kind)
    chart.update({
        "x_ticks": [fx(v) for v in ax.get_xticks()],
        "x_scale": x_kind,
        "x_tick_labels": [t.get_text() for t in ax.get_xticklabels()],
        "y_ticks": [fy(v) for v in ax.get_yticks()],
        "y_scale": y_kind,
        "y_tick_labels": [t.get_text() for t in ax.get_yticklabels()],
    })
    if kind == "line":
        series = [(ln.get_label(), ln.get_xydata()) for ln in ax.get_lines()]
    else:
        series = [(c.get_label(), c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection)]
    chart["elements"] = [
        {"label": label, "points": [[fx(x), fy(y)] for x, y in xy]} for label, xy in series
    ]
    return chart


def _tick_label_at(ticks, labels, pos):
    """The label of the tick nearest pos (bars sit on their ticks)."""
    best, best_d = None, None
    for t, lab in zip(ticks, labels):
        d = abs(float(t) - pos)
        if best_d is None or d < best_d:
            best, best_d = lab, d
    return best if best is not None else ""


def _bar_chart(ax):
    chart = _chart2d(ax, "bar")
    x_ticks, x_labels = ax.get_xticks(), [t.get_text() for t in ax.get_xticklabels()]
    y_ticks, y_labels = ax.get_yticks(), [t.get_text() for t in ax.get_yticklabels()]
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    if not containers:  # bars drawn as bare rectangles
        containers = [(None, [p for p in ax.patches if isinstance(p, Rectangle)])]
    else:
        containers = [(c, list(c.patches)) for c in containers]
    elements = []
    for container, rects in containers:
        group = container.get_label() if container is not None else ""
        if group.startswith("_"):
            group = ""
        horizontal = container is not None and getattr(container, "orientation", "vertical") == "horizontal"
        for r in rects:
            if horizontal:
                label = _tick_label_at(y_ticks, y_labels, r.get_y() + r.get_height() / 2)
                value = r.get_width()
            else:
                label = _tick_label_at(x_ticks, x_labels, r.get_x() + r.get_width() / 2)
                value = r.get_height()
            elements.append({"label": label, "group": group, "value": _round(value)})
    chart["elements"] = elements
    return chart


def _pie_chart(ax):
    elements = []
    for w in ax.patches:
        if isinstance(w, Wedge):
            elements.append({
                "label": w.get_label(),
                "angle": _round(abs(w.theta2 - w.theta1), 4),
                "radius": _round(w.r),
            })
    return {"type": "pie", "title": ax.get_title(), "elements": elements}


def _boxes(ax):
    """The boxes of a box plot: (x0, x1, y0, y1) of each, from PathPatch
    boxes (patch_artist=True) or closed 5-point Line2D outlines."""
    boxes = []
    for obj in ax.get_children():
        if isinstance(obj, PathPatch):
            ext = obj.get_path().get_extents()
            boxes.append((ext.x0, ext.x1, ext.y0, ext.y1))
        elif isinstance(obj, Line2D):
            xy = obj.get_xydata()
            if len(xy) == 5 and tuple(xy[0]) == tuple(xy[-1]) and len({round(float(x), 9) for x in xy[:, 0]}) == 2:
                xs, ys = xy[:, 0], xy[:, 1]
                boxes.append((float(min(xs)), float(max(xs)), float(min(ys)), float(max(ys))))
    return sorted(boxes)


def _box_chart(ax, boxes):
    chart = _chart2d(ax, "box_and_whisker")
    ticks, labels = ax.get_xticks(), [t.get_text() for t in ax.get_xticklabels()]
    lines = [ln for ln in ax.get_lines()]
    for x0, x1, q1, q3 in boxes:
        cx = (x0 + x1) / 2
        inside = [ln for ln in lines if len(ln.get_xdata()) and all(x0 - 1e-9 <= float(x) <= x1 + 1e-9 for x in ln.get_xdata())]
        whiskers = [ln for ln in inside if len(ln.get_xdata()) == 2 and all(abs(float(x) - cx) < 1e-9 for x in ln.get_xdata())
                    and ln.get_linestyle() not in ("None", "")]
        fliers = [ln for ln in inside if ln.get_linestyle() in ("None", "")]
        medians = [ln for ln in inside if len(ln.get_ydata()) == 2 and ln.get_ydata()[0] == ln.get_ydata()[1]
                   and abs(float(ln.get_xdata()[0]) - x0) < 1e-9 and abs(float(ln.get_xdata()[1]) - x1) < 1e-9
                   and q1 <= float(ln.get_ydata()[0]) <= q3]
        whisker_y = [float(y) for ln in whiskers for y in ln.get_ydata()]
        chart["elements"].append({
            "label": _tick_label_at(ticks, labels, cx),
            "min": _round(min(whisker_y) if whisker_y else q1),
            "first_quartile": _round(q1),
            "median": _round(medians[0].get_ydata()[0]) if medians else None,
            "third_quartile": _round(q3),
            "max": _round(max(whisker_y) if whisker_y else q3),
            "outliers": [_round(y) for ln in fliers for y in ln.get_ydata()],
        })
    return chart


def _is_box_plot(ax, objects, boxes):
    if not boxes:
        return False
    if not all(isinstance(o, (PathPatch, Line2D)) for o in objects):
        return False
    # Each box has its whiskers: vertical two-point lines on its centre.
    for x0, x1, _, _ in boxes:
        cx = (x0 + x1) / 2
        if not any(isinstance(o, Line2D) and len(o.get_xdata()) == 2 and all(abs(float(x) - cx) < 1e-9 for x in o.get_xdata())
                   for o in objects):
            return False
    return True


def ax_to_chart(ax):
    objects = [o for o in ax.get_children() if isinstance(o, (Line2D, PathCollection, Rectangle, Wedge, PathPatch))
               and o is not ax.patch and o.get_visible()]
    # The spines and the legend are not data; neither are axis artists.
    objects = [o for o in objects if o not in ax.spines.values()]
    if not objects:
        return {"type": "unknown", "title": ax.get_title(), "elements": []}
    boxes = _boxes(ax)
    if _is_box_plot(ax, objects, boxes):
        return _box_chart(ax, boxes)
    if all(isinstance(o, Wedge) for o in objects):
        return _pie_chart(ax)
    if all(isinstance(o, Line2D) for o in objects):
        return _point_chart(ax, "line")
    if all(isinstance(o, PathCollection) for o in objects):
        return _point_chart(ax, "scatter")
    if all(isinstance(o, Rectangle) for o in objects):
        return _bar_chart(ax)
    return {"type": "unknown", "title": ax.get_title(), "elements": []}


def figure_to_chart(fig):
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    if not axes:
        return None
    # Tick labels are set when the figure is drawn.
    fig.canvas.draw()
    if len(axes) > 1:
        sup = getattr(fig, "_suptitle", None)
        return {
            "type": "superchart",
            "title": sup.get_text() if isinstance(sup, Text) else "",
            "elements": [ax_to_chart(ax) for ax in axes],
        }
    return ax_to_chart(axes[0])
