"""Where the axes of bloatlab's figures go: one column of panels with a title band above, tick
labels and axis labels beside, and a legend to the right, never over the data.

matplotlib's constrained layout does this by bounding every artist of every axes, tick by tick,
before each save: half of the CPU a run spent drawing its seven figures (0.9 of 1.8 s, and a
second pass of the whole figure with drawing off). Our figures are all of one shape, so
`arrange` measures only the texts that set the margins (tick labels, axis labels, titles,
legends) and sets the subplot parameters from them.
"""

from __future__ import annotations

import math

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

PAD_IN = 0.06  # between neighbours, and at the figure's edges
LEGEND_GAP = 0.01  # of the axes' width, between an axes and its legend (bbox_to_anchor's x - 1)


def legend_beside(ax: Axes, rows: int = 12) -> None:
    """The axes' legend to its right, top-aligned, in columns of at most `rows` entries."""
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1 + LEGEND_GAP, 1), borderaxespad=0,
                  ncols=math.ceil(len(handles) / rows))


def arrange(fig: Figure) -> None:
    """Place the figure's axes, one column of panels sharing its width, so that their texts and
    legends fit inside the figure and clear each other. Call it once everything is drawn on the
    figure, before saving it: the margins follow its final ticks and labels."""
    axes = sorted((ax for ax in fig.axes if ax.get_subplotspec() is not None),
                  key=lambda ax: ax.get_subplotspec().rowspan.start)
    if not axes:
        return
    renderer = RendererAgg(int(fig.bbox.width), int(fig.bbox.height), fig.dpi)
    pad = PAD_IN * fig.dpi
    width, height = fig.bbox.width, fig.bbox.height
    bands = [_Bands(ax, renderer) for ax in axes]
    left = max(b.left for b in bands) + pad
    right = max(b.right for b in bands) + LEGEND_GAP * width + pad  # the gap: of the axes' width, at most the figure's
    suptitle = fig._suptitle  # no public handle on the Text; None without one
    title = _height(renderer, suptitle)
    if title:  # it hangs from its y, near the figure's top
        title += (1 - suptitle.get_position()[1]) * height + pad
    top = title + bands[0].above + pad
    bottom = bands[-1].below + pad
    gap = max((upper.below + lower.above for upper, lower in zip(bands, bands[1:])), default=0.0) + pad
    panel = (height - top - bottom - gap * (len(axes) - 1)) / len(axes)
    if panel <= 0 or left + right >= width:  # texts larger than the figure: leave matplotlib's defaults
        return
    fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height, bottom=bottom / height,
                        hspace=gap / panel)


class _Bands:
    """How far an axes' texts reach out of it on each side, in pixels: tick marks and labels,
    axis labels, titles, and a legend beside it (one inside it, loc="best", takes no room)."""

    def __init__(self, ax: Axes, renderer: RendererAgg):
        points = renderer.points_to_pixels
        _, y_labels, y_label_height = _ticks(ax.yaxis, renderer)
        x_reach, _, x_labels = _ticks(ax.xaxis, renderer)
        ylabel = ax.yaxis.label  # turned 90 degrees: its width on the page is its lines' height
        self.left = y_labels
        if ylabel.get_visible() and ylabel.get_text():
            self.left += ylabel.get_window_extent(renderer).width + points(ax.yaxis.labelpad)
        legend = ax.get_legend()
        beside = legend is not None and legend.get_bbox_to_anchor() is not ax.bbox
        self.right = legend.get_window_extent(renderer).width if beside else 0.0
        # The end y tick labels stick out by half their height, above and below.
        titles = max(_height(renderer, t) for t in (ax.title, ax._left_title, ax._right_title))  # no public handle
        self.above = max(titles + points(mpl.rcParams["axes.titlepad"]) if titles else 0.0, y_label_height / 2)
        xlabel = _height(renderer, ax.xaxis.label)
        below = x_reach + x_labels + (xlabel + points(ax.xaxis.labelpad) if xlabel else 0.0)
        self.below = max(below, y_label_height / 2)


def _height(renderer: RendererAgg, text: Text | None) -> float:
    if text is None or not text.get_visible() or not text.get_text():
        return 0.0
    return text.get_window_extent(renderer).height


def _ticks(axis: Axis, renderer: RendererAgg) -> tuple[float, float, float]:
    """How far the axis's ticks reach out of the axes, and its widest visible major tick label
    with that reach and the label's pad (0 without labels), and the tallest label's height."""
    ticks = axis.get_major_ticks()
    reach = renderer.points_to_pixels(max(ticks[0].get_tick_padding(), 0.0)) if ticks else 0.0
    labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
    if not labels:
        return reach, 0.0, 0.0
    boxes = [t.get_window_extent(renderer) for t in labels]
    reach += renderer.points_to_pixels(ticks[0].get_pad())
    return reach, max(b.width for b in boxes) + reach, max(b.height for b in boxes)
