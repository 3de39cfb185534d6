// A stacked daily bar chart in SVG with a dollar y-axis and a totals table, built with DOM calls
// (no library, no innerHTML). Drawn at the pixel width it is shown at, so its 12 px labels stay
// 12 px on a phone; a model's non-zero bar is never thinner than MIN_BAR px.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#0b5cad", "#e07b00", "#2a9d5b", "#a23db4", "#c8102e", "#1597a5", "#7a6c00", "#5b6570"];
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const FONT = 12;
  const MIN_BAR = 3;

  function el(name, attrs) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }
  function html(tag, cls, ...children) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    for (const c of children) node.append(c);
    return node;
  }
  // The tick step in micro-USD: 1, 2 or 5 times a power of ten, at least `raw`.
  function niceStep(raw) {
    if (!(raw > 0)) return 10000;
    const p = 10 ** Math.floor(Math.log10(raw));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return Math.max(1, Math.round(m * p));
    return Math.max(1, Math.round(10 * p));
  }
  const dayLabel = (period) => `${MONTHS[Number(period.slice(5, 7)) - 1] || period.slice(5, 7)} ${Number(period.slice(8, 10))}`;

  // days: [{period, spent_microusd, models: [{model, spent_microusd, calls}]}];
  // opts: {title, width (px), money(micros, fixed) → "$…" text (exact)}. Returns {svg, legend}.
  function dailyChart(days, opts) {
    const title = opts.title;
    const money = opts.money;
    const models = [];
    const totals = new Map();
    for (const d of days) {
      for (const m of d.models || []) {
        if (!models.includes(m.model)) models.push(m.model);
        const t = totals.get(m.model) || { micros: 0n, calls: 0 };
        t.micros += BigInt(m.spent_microusd);
        t.calls += m.calls || 0;
        totals.set(m.model, t);
      }
    }
    const color = (m) => COLORS[models.indexOf(m) % COLORS.length];

    const W = Math.max(260, Math.round(opts.width || 720));
    const H = W < 480 ? 200 : 240;
    const max = Math.max(0, ...days.map((d) => d.spent_microusd));
    const step = niceStep(max / 4);
    const topValue = Math.max(step, step * Math.ceil(max / step));
    const ticks = [];
    for (let v = 0; v <= topValue; v += step) ticks.push(v);
    const labels = ticks.map((v) => money(BigInt(v)));
    const left = 10 + Math.ceil(0.62 * FONT * Math.max(...labels.map((l) => l.length)));
    const right = W - 6, top = 8, bottom = H - 24;
    const y = (v) => bottom - ((bottom - top) * v) / topValue;

    const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart", role: "img", "aria-label": title });
    const t = el("title");
    t.textContent = title;
    svg.appendChild(t);

    const axis = el("g", { class: "y-axis", "font-size": FONT, fill: "#5b6570" });
    ticks.forEach((v, i) => {
      axis.appendChild(el("line", { x1: left, x2: right, y1: y(v), y2: y(v), stroke: i === 0 ? "#9aa4ae" : "#e3e7eb", "stroke-width": 1 }));
      const label = el("text", { x: left - 6, y: y(v) + FONT / 3, "text-anchor": "end", class: "y-tick" });
      label.textContent = labels[i];
      axis.appendChild(label);
    });
    svg.appendChild(axis);

    const bw = (right - left) / Math.max(1, days.length);
    const gap = bw > 6 ? 2 : 1;
    const xLabels = el("g", { class: "x-axis", "font-size": FONT, fill: "#5b6570", "text-anchor": "middle" });
    days.forEach((d, i) => {
      let yy = bottom;
      const g = el("g", { class: "day", "data-day": d.period, "data-microusd": d.spent_microusd });
      for (const m of d.models || []) {
        if (!(m.spent_microusd > 0)) continue;
        const hgt = Math.max(MIN_BAR, ((bottom - top) * m.spent_microusd) / topValue);
        yy -= hgt;
        const r = el("rect", { x: left + i * bw + gap / 2, y: yy, width: Math.max(1, bw - gap), height: hgt, fill: color(m.model) });
        const tip = el("title");
        tip.textContent = `${d.period} ${m.model}: ${money(BigInt(m.spent_microusd), true)}`;
        r.appendChild(tip);
        g.appendChild(r);
      }
      svg.appendChild(g);
    });
    // Day labels from the newest backwards, each kept only where it does not touch its neighbour.
    let edge = Infinity;
    for (let i = days.length - 1; i >= 0; i--) {
      const text = dayLabel(days[i].period);
      const half = (0.62 * FONT * text.length) / 2;
      const x = Math.min(right - half, Math.max(left + half, left + i * bw + bw / 2));
      if (x + half > edge - FONT) continue;
      const label = el("text", { x, y: H - 7 });
      label.textContent = text;
      xLabels.appendChild(label);
      edge = x - half;
    }
    svg.appendChild(xLabels);

    // The values without hovering: each model's spend and calls over the range, largest first.
    const legend = html("div", "legend");
    const order = models.slice().sort((a, b) => (totals.get(b).micros > totals.get(a).micros ? 1 : totals.get(b).micros < totals.get(a).micros ? -1 : 0));
    if (!order.length) {
      legend.append(html("p", "muted", "No spending in this period."));
      return { svg, legend };
    }
    const tbody = html("tbody", "");
    let all = 0n;
    let calls = 0;
    for (const m of order) {
      const sw = html("span", "swatch");
      sw.style.background = color(m);
      const total = totals.get(m);
      all += total.micros;
      calls += total.calls;
      const row = html("tr", "", html("td", "", sw, m), html("td", "num", String(total.calls)), html("td", "num", money(total.micros, true)));
      row.dataset.model = m;
      tbody.append(row);
    }
    tbody.append(html("tr", "total", html("th", "", "All models"), html("td", "num", String(calls)), html("td", "num", money(all, true))));
    const head = html("thead", "", html("tr", "", html("th", "", "Model"), html("th", "num", "Calls"), html("th", "num", "Spent")));
    legend.append(html("table", "legend-table", head, tbody));
    return { svg, legend };
  }

  window.GatewayChart = { dailyChart };
})();
