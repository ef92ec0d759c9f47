"""Where analysis.layout.arrange puts the axes: every text and legend inside the figure, legends
beside their axes and off the data, panels and titles clear of each other. Checked on the real
figures of a run, a sweep and a comparison, with long captions and many legend entries."""

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bloatlab.analysis import compare
from bloatlab.analysis.layout import arrange, legend_beside
from bloatlab.analysis.plots import build_figures
from bloatlab.analysis.sweep_plots import build_sweep_figures
from bloatlab.results.reader import load_run, load_sweep

TOLERANCE_PX = 1.0


def check_laid_out(name, fig, share=0.5):
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # as saving does: final ticks and positions
    page = fig.bbox
    whole = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)  # inches to pixels
    assert whole.x0 >= page.x0 - TOLERANCE_PX and whole.y0 >= page.y0 - TOLERANCE_PX, (name, whole, page)
    assert whole.x1 <= page.x1 + TOLERANCE_PX and whole.y1 <= page.y1 + TOLERANCE_PX, (name, whole, page)
    axes = sorted(fig.axes, key=lambda ax: -ax.get_position().y1)
    for ax in axes:
        legend = ax.get_legend()
        if legend is not None and legend.get_bbox_to_anchor() is not ax.bbox:  # beside, not over the data
            assert legend.get_window_extent(renderer).x0 >= ax.bbox.x1, name
        # The axes take a fair share of the page: margins are not eating it.
        assert ax.bbox.width > share * page.width, (name, ax.bbox)
    for upper, lower in zip(axes, axes[1:]):  # each panel's texts clear of the next one's
        assert upper.get_tightbbox(renderer).y0 >= lower.get_tightbbox(renderer).y1 - TOLERANCE_PX, name
    title = fig._suptitle
    if title is not None:
        assert title.get_window_extent(renderer).y0 >= axes[0].get_tightbbox(renderer).y1 - TOLERANCE_PX, name


def test_a_runs_figures_fit_their_page(make_run):
    run = make_run()
    figures, _ = build_figures(run)  # arranged as they are handed back
    for name, fig in figures.items():
        check_laid_out(name, fig)


def test_a_long_caption_and_many_flows_still_fit(make_run):
    figures, _ = build_figures(load_run(make_run()))
    fig = figures["throughput"]
    ax = fig.axes[0]
    for i in range(30):  # three columns of legend entries
        ax.plot([0, 1], [i, i], label=f"flow {i}")
    legend_beside(ax)
    ax.set_title("\n".join(["a caption of several lines"] * 4), fontsize=8, loc="left")
    arrange(fig)
    check_laid_out("throughput, crowded", fig, share=0.4)  # the legend takes three columns


def test_a_sweeps_and_a_comparisons_figures_fit_their_page(make_sweep, make_run):
    for drawn in build_sweep_figures(load_sweep(make_sweep())).drawn:
        arrange(drawn.figure)
        check_laid_out(drawn.name, drawn.figure)
    runs = [load_run(make_run("a")), load_run(make_run("b"))]
    for name, fig in compare.figures(runs, ["a", "b"]).items():
        arrange(fig)
        check_laid_out(name, fig)


def test_a_figure_without_axes_or_too_small_for_its_texts_is_left_alone():
    empty = Figure()
    arrange(empty)
    tiny = Figure(figsize=(1, 0.5))
    ax = tiny.subplots()
    ax.set_title("a title far longer than the figure is tall\n" * 5)
    before = ax.get_position().bounds
    arrange(tiny)
    assert ax.get_position().bounds == before
