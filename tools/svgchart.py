"""Small self-contained SVG charts (no dependencies, no JavaScript) for the
demo report (tools/demo-report), tools/demo-compare --svg and the benches.

Every chart is one <svg class="chart" data-chart="NAME"> string; every
series, bar group or timeline track is a <g data-series="LABEL"> so that a
test (tests/report) can check that each expected series was drawn.  Text is
escaped; numbers are plain.  Functions are pure: data in, string out.
"""
import html
import math

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]
# memory categories (zero_memory_stats tags), in stacking order
MEM_COLORS = {"params": "#4e79a7", "grads": "#f28e2b", "master": "#e15759", "optim": "#76b7b2",
              "buckets": "#59a14f", "gather": "#edc948", "other": "#b07aa1"}
# trace categories (docs/trace.md)
CAT_COLORS = {"step": "#c7c7c7", "hook": "#9467bd", "bucket": "#59a14f", "comm": "#f28e2b", "stage3": "#edc948",
              "optim": "#4e79a7", "fp16": "#e15759", "ckpt": "#8c564b"}

FONT = 'font-family="DejaVu Sans, Arial, sans-serif"'


def esc(s):
    return html.escape(str(s), quote=True)


def color(i):
    return PALETTE[i % len(PALETTE)]


def nice_ticks(lo, hi, n=5):
    """About n round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi:
        ticks.append(ticks[-1] + step)
    return ticks


def fmt_num(v):
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6 or a < 1e-3:
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def tick_labels(ticks):
    """Labels for evenly spaced ticks: as many decimals as the step needs,
    so that neighbours never print alike."""
    if len(ticks) < 2:
        return [fmt_num(t) for t in ticks]
    step = abs(ticks[1] - ticks[0]) or 1.0
    if max(abs(t) for t in ticks) >= 1e6:
        return [f"{t:.3g}" for t in ticks]
    dec = 0
    while dec < 9 and abs(round(step, dec) - step) > step * 1e-6:
        dec += 1
    return [f"{t:.{dec}f}" for t in ticks]


def _open(name, w, h, title):
    return [f'<svg class="chart" data-chart="{esc(name)}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            f'viewBox="0 0 {w} {h}" role="img" aria-label="{esc(title)}" {FONT} font-size="12">',
            f'<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>',
            f'<text x="{w / 2:.1f}" y="18" text-anchor="middle" font-size="14" font-weight="bold">{esc(title)}</text>']


def _legend(parts, items, x, y, swatch="rect"):
    """items: [(label, color)], drawn in a column from (x, y)."""
    for i, (label, c) in enumerate(items):
        yy = y + i * 16
        if swatch == "line":
            parts.append(f'<line x1="{x}" y1="{yy + 6}" x2="{x + 16}" y2="{yy + 6}" stroke="{c}" stroke-width="3"/>')
        else:
            parts.append(f'<rect x="{x}" y="{yy}" width="12" height="12" fill="{c}"/>')
        parts.append(f'<text x="{x + 20}" y="{yy + 10}">{esc(label)}</text>')


def _axes(parts, x0, y0, pw, ph, xt, yt, xmap, ymap, xlabel, ylabel):
    for t, lab in zip(yt, tick_labels(yt)):
        y = ymap(t)
        parts.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + pw}" y2="{y:.1f}" stroke="#e6e6e6"/>')
        parts.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{esc(lab)}</text>')
    for t, lab in zip(xt or [], tick_labels(xt or [])):
        x = xmap(t)
        parts.append(f'<line x1="{x:.1f}" y1="{y0 + ph}" x2="{x:.1f}" y2="{y0 + ph + 4}" stroke="#333"/>')
        parts.append(f'<text x="{x:.1f}" y="{y0 + ph + 17}" text-anchor="middle">{esc(lab)}</text>')
    parts.append(f'<line x1="{x0}" y1="{y0 + ph}" x2="{x0 + pw}" y2="{y0 + ph}" stroke="#333"/>')
    parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + ph}" stroke="#333"/>')
    if xlabel:
        parts.append(f'<text x="{x0 + pw / 2:.1f}" y="{y0 + ph + 34}" text-anchor="middle">{esc(xlabel)}</text>')
    if ylabel:
        parts.append(f'<text transform="translate(14,{y0 + ph / 2:.1f}) rotate(-90)" text-anchor="middle">'
                     f'{esc(ylabel)}</text>')


def line_chart(name, title, series, xlabel="", ylabel="", width=760, height=340, dashed_after_first=True):
    """series: [(label, [(x, y), ...])].  Later series are dashed so that
    curves lying exactly on each other stay visible."""
    x0, y0, pw, ph = 64, 32, width - 64 - 150, height - 32 - 48
    pts = [(x, y) for _, s in series for x, y in s if y is not None and math.isfinite(y)]
    xs = [p[0] for p in pts] or [0, 1]
    ys = [p[1] for p in pts] or [0, 1]
    xt, yt = nice_ticks(min(xs), max(xs)), nice_ticks(min(ys), max(ys))
    xmap = lambda v: x0 + (v - xt[0]) / ((xt[-1] - xt[0]) or 1) * pw
    ymap = lambda v: y0 + ph - (v - yt[0]) / ((yt[-1] - yt[0]) or 1) * ph
    parts = _open(name, width, height, title)
    _axes(parts, x0, y0, pw, ph, xt, yt, xmap, ymap, xlabel, ylabel)
    dashes = ["", "6 4", "2 3", "10 3 2 3", "1 4", "8 8"]
    for i, (label, s) in enumerate(series):
        d = " ".join(f"{'M' if k == 0 else 'L'}{xmap(x):.1f},{ymap(y):.1f}"
                     for k, (x, y) in enumerate(p for p in s if p[1] is not None and math.isfinite(p[1])))
        dash = dashes[i % len(dashes)] if dashed_after_first else ""
        sw = 2.0 + 1.5 * (len(series) - 1 - i)  # earlier series wider: identical curves stay visible as bands
        parts.append(f'<g data-series="{esc(label)}"><path d="{d}" fill="none" stroke="{color(i)}" stroke-width="{sw:.1f}"'
                     f'{f" stroke-dasharray={chr(34)}{dash}{chr(34)}" if dash else ""}/></g>')
    _legend(parts, [(l, color(i)) for i, (l, _) in enumerate(series)], x0 + pw + 16, y0 + 4, swatch="line")
    parts.append("</svg>")
    return "\n".join(parts)


def bar_chart(name, title, bars, ylabel="", width=520, height=300, unit=""):
    """bars: [(label, value)]; one color per bar, the value printed on top."""
    x0, y0, pw, ph = 64, 32, width - 64 - 16, height - 32 - 48
    vals = [v for _, v in bars if v is not None] or [1]
    yt = nice_ticks(0, max(vals))
    ymap = lambda v: y0 + ph - v / (yt[-1] or 1) * ph
    parts = _open(name, width, height, title)
    _axes(parts, x0, y0, pw, ph, None, yt, None, ymap, "", ylabel)
    n = max(len(bars), 1)
    slot = pw / n
    for i, (label, v) in enumerate(bars):
        bw = slot * 0.6
        x = x0 + i * slot + (slot - bw) / 2
        v = v or 0
        parts.append(f'<g data-series="{esc(label)}"><rect x="{x:.1f}" y="{ymap(v):.1f}" width="{bw:.1f}" '
                     f'height="{max(y0 + ph - ymap(v), 0.5):.1f}" fill="{color(i)}"><title>{esc(label)}: '
                     f'{esc(fmt_num(v))}{esc(unit)}</title></rect>'
                     f'<text x="{x + bw / 2:.1f}" y="{ymap(v) - 4:.1f}" text-anchor="middle">{esc(fmt_num(v))}</text>'
                     f'<text x="{x + bw / 2:.1f}" y="{y0 + ph + 17}" text-anchor="middle">{esc(label)}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts)


def stacked_bars(name, title, groups, categories, colors=None, ylabel="", width=900, height=360, ref_label=None):
    """groups: [(group label, [(bar label, {category: value}, is_reference)])].
    Bars of a group stand side by side; reference bars (a prediction) are
    drawn hatched-light with a dark outline.  Each group is one
    data-series."""
    colors = colors or MEM_COLORS
    x0, y0, pw, ph = 70, 32, width - 70 - 120, height - 32 - 62
    totals = [sum(v.get(c, 0) for c in categories) for _, bars in groups for _, v, _ in bars] or [1]
    yt = nice_ticks(0, max(totals))
    ymap = lambda v: y0 + ph - v / (yt[-1] or 1) * ph
    parts = _open(name, width, height, title)
    parts.append('<defs><pattern id="hatch-%s" width="6" height="6" patternUnits="userSpaceOnUse" '
                 'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff"/>'
                 '<line x1="0" y1="0" x2="0" y2="6" stroke="#999" stroke-width="2"/></pattern></defs>' % esc(name))
    _axes(parts, x0, y0, pw, ph, None, yt, None, ymap, "", ylabel)
    nbars = sum(len(b) for _, b in groups) + len(groups)
    slot = pw / max(nbars, 1)
    x = x0 + slot / 2
    for g, (glabel, bars) in enumerate(groups):
        gx0 = x
        parts.append(f'<g data-series="{esc(glabel)}">')
        for blabel, vals, ref in bars:
            bw = slot * 0.8
            base = 0.0
            for c in categories:
                v = vals.get(c, 0) or 0
                if v <= 0:
                    continue
                y1, y2 = ymap(base + v), ymap(base)
                fill = colors.get(c, "#999")
                extra = f' fill-opacity="0.45" stroke="#333" stroke-dasharray="3 2"' if ref else ""
                parts.append(f'<rect x="{x:.1f}" y="{y1:.1f}" width="{bw:.1f}" height="{max(y2 - y1, 0.5):.1f}" '
                             f'fill="{fill}"{extra}><title>{esc(glabel)} {esc(blabel)} {esc(c)}: '
                             f'{esc(fmt_num(v))}</title></rect>')
                base += v
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{y0 + ph + 14}" text-anchor="middle" font-size="10">'
                         f'{esc(blabel)}</text>')
            x += slot
        parts.append(f'<text x="{(gx0 + x - slot * 0.2) / 2:.1f}" y="{y0 + ph + 32}" text-anchor="middle" '
                     f'font-weight="bold">{esc(glabel)}</text></g>')
        x += slot
    _legend(parts, [(c, colors.get(c, "#999")) for c in categories], x0 + pw + 16, y0 + 4)
    if ref_label:
        yy = y0 + 8 + 16 * len(categories)
        parts.append(f'<rect x="{x0 + pw + 16}" y="{yy}" width="12" height="12" fill="#4e79a7" fill-opacity="0.45" '
                     f'stroke="#333" stroke-dasharray="3 2"/><text x="{x0 + pw + 36}" y="{yy + 10}">'
                     f'{esc(ref_label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def timeline(name, title, tracks, t0, t1, width=900, row=13, unit_ms=True, note=""):
    """tracks: [(track label, [(start, end, span name, category), ...])] in
    microseconds; spans of one track may nest (drawn thinner when inside
    another).  Each track is one data-series."""
    label_w = 150
    pw = width - label_w - 20
    height = 40 + row * len(tracks) + 62
    parts = _open(name, width, height, title)
    span = (t1 - t0) or 1.0
    xmap = lambda t: label_w + (t - t0) / span * pw
    y = 30
    for label, spans in tracks:
        parts.append(f'<g data-series="{esc(label)}">')
        parts.append(f'<text x="{label_w - 6}" y="{y + row - 3}" text-anchor="end" font-size="10">{esc(label)}</text>')
        parts.append(f'<line x1="{label_w}" y1="{y + row - 0.5}" x2="{label_w + pw}" y2="{y + row - 0.5}" '
                     f'stroke="#eeeeee"/>')
        stack = []
        for s, e, sname, cat in sorted(spans, key=lambda v: (v[0], -v[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            depth = len(stack)
            stack.append(e)
            s2, e2 = max(s, t0), min(e, t1)
            if e2 < s2:
                continue
            inset = min(depth * 2.5, row / 2 - 1.5)
            w = max(xmap(e2) - xmap(s2), 0.6)
            parts.append(f'<rect x="{xmap(s2):.2f}" y="{y + 1 + inset:.1f}" width="{w:.2f}" '
                         f'height="{row - 2 - 2 * inset:.1f}" fill="{CAT_COLORS.get(cat, "#999")}">'
                         f'<title>{esc(sname)} ({(e - s) / 1000:.3f} ms)</title></rect>')
        parts.append("</g>")
        y += row
    xt = nice_ticks(0, span / 1000.0 if unit_ms else span, 8)
    for t, lab in zip(xt, tick_labels(xt)):
        tt = t * 1000.0 if unit_ms else t
        if tt > span * 1.0001:
            continue
        x = xmap(t0 + tt)
        parts.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#333"/>'
                     f'<text x="{x:.1f}" y="{y + 16}" text-anchor="middle" font-size="10">{esc(lab)}</text>')
    parts.append(f'<text x="{label_w + pw / 2:.1f}" y="{y + 30}" text-anchor="middle" font-size="11">'
                 f'{"ms" if unit_ms else "us"} since the step began{esc(note)}</text>')
    cats = sorted({c for _, sp in tracks for *_, c in sp})
    lx = label_w
    for c in cats:
        parts.append(f'<rect x="{lx}" y="{y + 38}" width="10" height="10" fill="{CAT_COLORS.get(c, "#999")}"/>'
                     f'<text x="{lx + 13}" y="{y + 47}" font-size="10">{esc(c)}</text>')
        lx += 16 + 7 * len(c)
    parts.append("</svg>")
    return "\n".join(parts)
