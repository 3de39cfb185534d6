// A stacked daily bar chart in SVG, built with DOM calls (no library, no innerHTML).
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#0b5cad", "#e07b00", "#2a9d5b", "#a23db4", "#c8102e", "#1597a5", "#7a6c00", "#5b6570"];

  function el(name, attrs) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  // days: [{period, spent_microusd, models: [{model, spent_microusd}]}]; returns {svg, legend}.
  function dailyChart(days, title) {
    const models = [];
    for (const d of days) for (const m of d.models || []) if (!models.includes(m.model)) models.push(m.model);
    const color = (m) => COLORS[models.indexOf(m) % COLORS.length];
    const max = Math.max(1, ...days.map((d) => d.spent_microusd));
    const W = 720, H = 220, left = 8, bottom = 22, top = 8;
    const bw = (W - left) / Math.max(1, days.length);
    const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title });
    const t = el("title"); t.textContent = title; svg.appendChild(t);
    days.forEach((d, i) => {
      let y = H - bottom;
      const g = el("g", { "data-day": d.period, "data-microusd": d.spent_microusd });
      for (const m of d.models || []) {
        const h = ((H - bottom - top) * m.spent_microusd) / max;
        if (h <= 0) continue;
        y -= h;
        const r = el("rect", { x: left + i * bw + 1, y, width: Math.max(1, bw - 2), height: h, fill: color(m.model) });
        const tip = el("title"); tip.textContent = `${d.period} ${m.model}: $${m.spent_usd}`; r.appendChild(tip);
        g.appendChild(r);
      }
      svg.appendChild(g);
      const last = days.length - 1;
      if (i === 0 || i === last || (i % 7 === 0 && last - i >= 4)) {
        const label = el("text", { x: left + i * bw + bw / 2, y: H - 6, "font-size": 11, "text-anchor": "middle", fill: "#5b6570" });
        label.textContent = d.period.slice(5);
        svg.appendChild(label);
      }
    });
    const legend = document.createElement("div");
    legend.className = "legend";
    for (const m of models) {
      const item = document.createElement("span");
      const sw = document.createElement("span"); sw.className = "swatch"; sw.style.background = color(m);
      item.append(sw, document.createTextNode(m));
      legend.appendChild(item);
    }
    return { svg, legend };
  }

  window.GatewayChart = { dailyChart };
})();
