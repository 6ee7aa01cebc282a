// Run in a rendered report: what a reader would see as broken. Returns JSON-able data.
(() => {
  const vw = document.documentElement.clientWidth;
  const label = (el) => {
    const id = el.id ? "#" + el.id : "";
    const text = (el.textContent || "").trim().slice(0, 40);
    return `${el.tagName.toLowerCase()}${id} "${text}"`;
  };
  const overflow = [];
  for (const el of document.body.querySelectorAll("*")) {
    if (el.closest("svg") && el.tagName.toLowerCase() !== "svg") continue;
    const r = el.getBoundingClientRect();
    if (r.width && (r.right > vw + 0.5 || r.left < -0.5)) overflow.push(label(el));
  }
  const charts = [];
  for (const fig of document.querySelectorAll("figure")) {
    const svg = fig.querySelector("svg");
    if (!svg) continue;
    const box = svg.getBoundingClientRect();
    const titles = [...svg.querySelectorAll(".axis-title")].map((t) => t.textContent);
    const texts = [...svg.querySelectorAll("text")].filter((t) => !t.closest("title"));
    const clipped = texts
      .map((t) => [t, t.getBoundingClientRect()])
      .filter(([, r]) => r.width && (r.left < box.left - 0.5 || r.right > box.right + 0.5 ||
                                     r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5))
      .map(([t]) => t.textContent);
    const labels = [...svg.querySelectorAll(".point-label")].map((t) => [t.textContent, t.getBoundingClientRect()]);
    const overlaps = [];
    for (let i = 0; i < labels.length; i++)
      for (let j = i + 1; j < labels.length; j++) {
        const [a, ra] = labels[i], [b, rb] = labels[j];
        if (ra.left < rb.right && rb.left < ra.right && ra.top < rb.bottom && rb.top < ra.bottom)
          overlaps.push(`${a} / ${b}`);
      }
    charts.push({ id: fig.id, titles, clipped, overlaps, labels: labels.length });
  }
  return { width: vw, scrollWidth: document.documentElement.scrollWidth, overflow, charts };
})()
