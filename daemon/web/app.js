// The live page: polls /api/status every second and fills each pipeline's
// section; reloads the atom picture when the model version changes.
"use strict";

const sections = new Map();
for (const el of document.querySelectorAll("section.pipeline")) {
  sections.set(el.dataset.name, { el, last: null, shownVersion: null, loading: false });
}

function field(el, name, value) {
  const f = el.querySelector(`[data-field="${name}"]`);
  if (f) f.textContent = value;
}

function show(p, now) {
  const s = sections.get(p.name);
  if (!s) return;
  const el = s.el;
  const h = el.querySelector(".health");
  h.textContent = p.health.state;
  h.className = "health " + p.health.state;
  field(el, "reason", p.health.reason || "");
  for (const k of ["learned", "backlog", "model_version", "received", "rejected", "published", "checkpoints"]) {
    field(el, k, p[k]);
  }
  if (s.last) {
    const dt = (now - s.last.t) / 1000;
    if (dt > 0) field(el, "rate", ((p.learned - s.last.learned) / dt).toFixed(1));
  }
  s.last = { t: now, learned: p.learned };
  const img = el.querySelector("img.atoms");
  if (img && p.model_version !== s.shownVersion && !s.loading) {
    s.loading = true;
    const v = p.model_version;
    img.onload = () => { s.loading = false; s.shownVersion = v; };
    img.onerror = () => { s.loading = false; s.shownVersion = v; };
    img.src = img.dataset.src + "?v=" + v;
  }
}

async function poll() {
  try {
    const r = await fetch("/api/status", { cache: "no-store" });
    const st = await r.json();
    const now = Date.now();
    for (const p of st.pipelines || []) show(p, now);
    document.getElementById("updated").textContent = "updated " + new Date(now).toLocaleTimeString();
  } catch (e) {
    document.getElementById("updated").textContent = "status unavailable: " + e;
  }
}

// drawStrip draws a vector as bars around a middle line, one per entry.
function drawStrip(canvas, v) {
  const g = canvas.getContext("2d");
  g.clearRect(0, 0, canvas.width, canvas.height);
  const mid = canvas.height / 2;
  const m = Math.max(1e-12, ...v.map(Math.abs));
  const w = canvas.width / v.length;
  v.forEach((x, i) => {
    g.fillStyle = x >= 0 ? "#3465a4" : "#cc0000";
    const h = (x / m) * mid;
    g.fillRect(i * w, x >= 0 ? mid - h : mid, Math.max(1, w - 1), Math.abs(h));
  });
  g.fillStyle = "#999";
  g.fillRect(0, mid, canvas.width, 1);
}

for (const { el } of sections.values()) {
  const name = el.dataset.name;
  const embed = el.querySelector("form.embed");
  if (embed) {
    embed.image.addEventListener("change", async () => {
      const file = embed.image.files[0];
      if (!file) return;
      // A video frame needs a stream and a frame index; an embedding
      // does not follow streams, so any will do.
      const headers = el.dataset.modality === "video" ? { "Smtd-Stream": "page", "Smtd-Frame": "0" } : {};
      const r = await fetch(`/api/pipelines/${encodeURIComponent(name)}/embed`, { method: "POST", body: file, headers });
      const j = await r.json();
      if (!r.ok) { field(el, "embed_info", j.error); return; }
      drawStrip(embed.querySelector("canvas.strip"), j.vector);
      field(el, "embed_info", `${j.vector.length} dimensions, model version ${j.model_version}`);
    });
  }
  const words = el.querySelector("form.words");
  if (words) {
    words.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const list = words.querySelector("ol.neighbours");
      list.textContent = "";
      const r = await fetch(`/api/pipelines/${encodeURIComponent(name)}/neighbours?word=${encodeURIComponent(words.word.value)}&k=10`);
      const j = await r.json();
      if (!r.ok) { const li = document.createElement("li"); li.textContent = j.error; list.append(li); return; }
      for (const n of j.neighbours) {
        const li = document.createElement("li");
        li.textContent = `${n.word} (${n.cosine.toFixed(3)})`;
        list.append(li);
      }
    });
  }
}

poll();
setInterval(poll, 1000);
