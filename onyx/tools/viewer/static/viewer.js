/* onyx view: draws the model document that Python put into #onyx-data.
 *
 * layout():  a layered (Sugiyama) layout of each graph, expanded subgraphs laid out first and
 *            placed inside their node: longest-path layers, one chain of dummy points per long
 *            value, barycentre ordering, then x by isotonic regression towards the neighbours.
 * render():  draws only what lies near the viewport: SVG elements (each node carries
 *            data-node, each edge data-edge) while few enough are visible, a canvas overview of
 *            the visible boxes when zoomed out over a large graph.
 * panel:     the selected node's details, the model's metadata.
 * Test and console hooks live on window.onyxView.
 */
(function () {
  "use strict";
  const T0 = performance.now();
  const DOC = JSON.parse(document.getElementById("onyx-data").textContent);
  const GRAPHS = DOC.graphs;
  const SVGNS = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);

  // ---- sizes and colours ------------------------------------------------------------------------
  const HEAD = 22, LINE = 13, PAD = 6, MINW = 64, MAXW = 250, GAPX = 26, GAPY = 40, DUMMYW = 12;
  const IO_H = 24, CLUSTER_PAD = 12, CLUSTER_HEAD = 24, SUB_LABEL = 16;
  /** Above this many boxes in view the drawing switches to the canvas overview. */
  const SVG_LIMIT = 2500;
  const FAMILY_COLOURS = {
    conv: "#335c99", linear: "#6b4fa3", activation: "#a33d3d", norm: "#2f7d5b", pool: "#2e6f80",
    math: "#4d4d4d", reduce: "#8a5a1f", shape: "#7a5c3c", quant: "#9b4b87", control: "#b06a12",
    constant: "#8d8d8d", function: "#1f6f6f", other: "#444444",
  };

  const state = {
    expanded: new Set(),   // ids of nodes whose subgraphs are drawn in place
    selected: null,        // a box id
    colour: "op",
    hits: [], hit: -1,
    k: 1, tx: 0, ty: 0,    // screen = world * k + t
    mode: "svg",
  };

  // ---- the document: lookups --------------------------------------------------------------------
  const nodeById = new Map();   // id -> {node, g}
  const producerOf = [];        // per graph: value name -> node id
  GRAPHS.forEach((g, gi) => {
    const prod = new Map();
    for (const n of g.nodes) {
      nodeById.set(n.id, { node: n, g: gi });
      for (const o of n.outputs) if (o) prod.set(o, n.id);
    }
    producerOf.push(prod);
  });
  const parentNode = new Map(); // graph index -> id of a node holding it (for search reveal)
  for (const [id, { node }] of nodeById) for (const [, sg] of node.subgraphs || []) if (!parentNode.has(sg)) parentNode.set(sg, id);

  function valueInfo(gi, name) {
    for (let g = gi; g !== null && g !== undefined; g = GRAPHS[g].parent) {
      const v = GRAPHS[g].values[name];
      if (v) return v;
    }
    return null;
  }
  function isInit(gi, name) { const v = valueInfo(gi, name); return !!(v && v.init); }

  const dims = (s) => (s == null ? "?" : s.map((d) => (d === null ? "?" : d)).join("×"));
  function typeLabel(v) {
    if (!v) return "";
    if (v.shape == null) return v.type || "";
    return `${v.type || "?"} ⟨${dims(v.shape)}⟩`;
  }
  const textW = (s, px, bold) => s.length * px * (bold ? 0.68 : 0.6);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const fmt = (x) => (typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toPrecision(4).replace(/\.?0+(e|$)/, "$1")) : String(x));

  // ---- layout -----------------------------------------------------------------------------------
  /** The face of a collapsed node: header op and a few lines (folded initializers, attributes). */
  function nodeFace(n, gi) {
    const inits = n.inputs.filter((i) => i && isInit(gi, i));
    const lines = [];
    for (const name of inits.slice(0, 4)) {
      const v = valueInfo(gi, name);
      lines.push({ text: `${shortName(name)} ⟨${dims(v.shape)}⟩`, init: true });
    }
    if (inits.length > 4) lines.push({ text: `+${inits.length - 4} more weights`, init: true });
    for (const k of n.key) lines.push({ text: k, init: false });
    // room in the header for the run's figure ("12.5 µs", "err 0.0123") whichever colouring
    const metric = gi === 0 && (n.time !== undefined || n.error !== undefined) ? 56 : 0;
    let w = Math.max(textW(n.op, 12, true) + 2 * PAD + (inits.length ? 26 : 0) + (n.subgraphs ? 20 : 0) + metric, MINW);
    for (const l of lines) w = Math.max(w, textW(l.text, 10) + 2 * PAD);
    w = Math.min(w, MAXW);
    const h = HEAD + (lines.length ? lines.length * LINE + 6 : 0);
    return { lines, inits: inits.length, w, h };
  }
  function shortName(name) {
    const parts = name.split(/[./:]/).filter(Boolean);
    const s = parts.length ? parts[parts.length - 1] : name;
    return s.length > 18 ? s.slice(0, 17) + "…" : s;
  }

  /** Lays out graph gi; returns {w, h, boxes, edges} in coordinates local to the graph. */
  function layoutGraph(gi, depth) {
    const { V, prod } = graphVertices(gi, depth);
    const { uses, preds, succs } = valueUses(V, prod);
    const layer = assignLayers(V, preds, succs);
    const { chains, L, up, down } = addChains(V, uses, prod, layer);
    const layers = orderLayers(V, L, up, down);
    const X = placeX(V, layers, up, down);
    return route(gi, V, L, layers, X, chains);
  }

  /** The boxes of a graph: its inputs, its nodes (expanded ones as clusters), its outputs;
   * and the vertex and output port that produces each value. */
  function graphVertices(gi, depth) {
    const g = GRAPHS[gi];
    const V = [];               // vertices: {kind, id, w, h, ins, outs, ...}
    const prod = new Map();     // value -> [vertex index, output port index]
    const io = (kind, name) => ({ kind, id: `${kind}:${gi}:${name}`, value: name, w: Math.max(60, textW(name, 11) + 20), h: IO_H, outs: kind === "input" ? [name] : [], ins: kind === "input" ? [] : [name] });
    for (const name of g.inputs) { prod.set(name, [V.length, 0]); V.push(io("input", name)); }
    for (const n of g.nodes) {
      const vi = V.length;
      n.outputs.forEach((o, k) => { if (o) prod.set(o, [vi, k]); });
      // (the values a node's subgraphs read from this graph count as its inputs)
      const ins = n.inputs.concat(n.captures || []).filter((i) => i && !isInit(gi, i));
      if (n.subgraphs && state.expanded.has(n.id) && depth < 12) V.push(clusterVertex(n, gi, ins, depth));
      else {
        const face = nodeFace(n, gi);
        V.push({ kind: "node", id: n.id, node: n, gi, w: face.w, h: face.h, face, outs: n.outputs, ins });
      }
    }
    for (const name of g.outputs) V.push(io("output", name));
    return { V, prod };
  }

  /** Each value's consumers ([vertex, input port], a vertex may read a value twice), and each
   * vertex's producers and consumers. */
  function valueUses(V, prod) {
    const preds = V.map(() => []), succs = V.map(() => []);
    const uses = new Map();
    V.forEach((v, vi) => v.ins.forEach((name, port) => {
      const p = prod.get(name);
      if (!p || p[0] === vi) return;
      preds[vi].push(p[0]); succs[p[0]].push(vi);
      if (!uses.has(name)) uses.set(name, []);
      uses.get(name).push([vi, port]);
    }));
    return { uses, preds, succs };
  }

  /** Longest path from the sources; sources then pulled down next to their first use; graph
   * outputs all on the last layer (they read as the graph's end, as in Netron). */
  function assignLayers(V, preds, succs) {
    const layer = new Int32Array(V.length);
    for (let vi = 0; vi < V.length; vi++) { // vertices are in execution order
      let l = 0;
      for (const p of preds[vi]) if (p < vi) l = Math.max(l, layer[p] + 1);
      layer[vi] = l;
    }
    for (let vi = V.length - 1; vi >= 0; vi--) {
      if (preds[vi].length || !succs[vi].length) continue;
      let l = Infinity;
      for (const s of succs[vi]) l = Math.min(l, layer[s] - 1);
      if (l !== Infinity && l > layer[vi]) layer[vi] = l;
    }
    let last = 0;
    for (let vi = 0; vi < V.length; vi++) if (V[vi].kind !== "output") last = Math.max(last, layer[vi]);
    for (let vi = 0; vi < V.length; vi++) if (V[vi].kind === "output") layer[vi] = last + 1;
    return layer;
  }

  /** One chain of dummy points per value, down to its last consumer's layer (shared by all its
   * uses); the links between adjacent layers (``up``/``down``) that ordering and placement use. */
  function addChains(V, uses, prod, layer) {
    const chains = new Map();   // value -> {src, port, dummies: [vertex per layer], list: uses}
    for (const [name, list] of uses) {
      const [src, port] = prod.get(name);
      let deepest = layer[src];
      for (const [c] of list) deepest = Math.max(deepest, layer[c]);
      const dummies = [];
      for (let l = layer[src] + 1; l < deepest; l++) { dummies.push(V.length); V.push({ kind: "dummy", w: DUMMYW, h: 0 }); }
      chains.set(name, { src, port, dummies, list });
    }
    const L = new Int32Array(V.length); // layers of the vertices and of the dummy points
    L.set(layer);
    for (const ch of chains.values()) ch.dummies.forEach((d, i) => { L[d] = L[ch.src] + 1 + i; });
    const up = V.map(() => []), down = V.map(() => []);
    const link = (a, b) => { down[a].push(b); up[b].push(a); };
    for (const ch of chains.values()) {
      let prev = ch.src;
      for (const d of ch.dummies) { link(prev, d); prev = d; }
      for (const [c] of ch.list) {
        const via = L[c] - 1 - L[ch.src] - 1; // the chain's point just above the consumer
        link(via >= 0 ? ch.dummies[via] : ch.src, c);
      }
    }
    return { chains, L, up, down };
  }

  /** Vertices per layer: execution order, then 4 barycentre sweeps each way. */
  function orderLayers(V, L, up, down) {
    let nLayers = 0;
    for (let vi = 0; vi < V.length; vi++) nLayers = Math.max(nLayers, L[vi] + 1);
    const layers = Array.from({ length: nLayers }, () => []);
    for (let vi = 0; vi < V.length; vi++) layers[L[vi]].push(vi);
    const pos = new Float64Array(V.length), key = new Float64Array(V.length);
    for (const ly of layers) ly.forEach((v, i) => { pos[v] = i; });
    const sweep = (ly, nb) => {
      for (const v of ly) {
        const ns = nb[v];
        if (!ns.length) { key[v] = pos[v]; continue; }
        let s = 0;
        for (const u of ns) s += pos[u];
        key[v] = s / ns.length;
      }
      ly.sort((a, b) => key[a] - key[b] || pos[a] - pos[b]);
      ly.forEach((v, i) => { pos[v] = i; });
    };
    for (let it = 0; it < 4; it++) {
      for (let l = 1; l < nLayers; l++) sweep(layers[l], up);
      for (let l = nLayers - 2; l >= 0; l--) sweep(layers[l], down);
    }
    return layers;
  }

  /** x of each vertex's centre: packed, then each layer pulled towards its neighbours (down,
   * up, down, up, then both twice), keeping the order and the gaps. */
  function placeX(V, layers, up, down) {
    const X = new Float64Array(V.length), W = (v) => V[v].w;
    for (const ly of layers) {
      let x = 0;
      ly.forEach((v, i) => { if (i) x += (W(ly[i - 1]) + W(v)) / 2 + GAPX; X[v] = x; });
      for (const v of ly) X[v] -= x / 2;
    }
    const place = (ly, nbs) => {
      const n = ly.length;
      const target = new Float64Array(n), weight = new Float64Array(n), off = new Float64Array(n);
      for (let i = 0; i < n; i++) {
        const v = ly[i];
        // a box follows the boxes next to it; long edges (dummies) bend to them, not the reverse,
        // else every residual connection pulls the graph sideways a little more
        let s = 0, c = 0, sr = 0, cr = 0;
        for (const nb of nbs) for (const u of nb[v]) { s += X[u]; c++; if (V[u].kind !== "dummy") { sr += X[u]; cr++; } }
        if (V[v].kind !== "dummy" && cr) { s = sr; c = cr; }
        target[i] = c ? s / c : X[v];
        weight[i] = c ? (V[v].kind === "dummy" ? 0.02 : 1) : 0.01;
        if (i) off[i] = off[i - 1] + (W(ly[i - 1]) + W(v)) / 2 + GAPX;
      }
      const y = isotonic(Array.from(target, (t, i) => t - off[i]), weight);
      for (let i = 0; i < n; i++) X[ly[i]] = y[i] + off[i];
    };
    const nLayers = layers.length;
    for (let it = 0; it < 6; it++) {
      const downward = it % 2 === 0;
      for (let l = 0; l < nLayers; l++) {
        place(layers[downward ? l : nLayers - 1 - l], it >= 4 ? [up, down] : downward ? [up] : [down]);
      }
    }
    return X;
  }

  /** Final coordinates: rows as tall as their tallest box; each edge a polyline from its
   * producer's output port through its chain's points (straight down each row it crosses) to
   * its consumer's input port, the first edge of each value carrying its label. */
  function route(gi, V, L, layers, X, chains) {
    const nLayers = layers.length;
    const rowY = new Float64Array(nLayers), rowH = new Float64Array(nLayers);
    for (let l = 0; l < nLayers; l++) for (const v of layers[l]) rowH[l] = Math.max(rowH[l], V[v].h);
    for (let l = 1; l < nLayers; l++) rowY[l] = rowY[l - 1] + rowH[l - 1] + GAPY;
    let minX = Infinity, maxX = -Infinity;
    for (let vi = 0; vi < V.length; vi++) { minX = Math.min(minX, X[vi] - V[vi].w / 2); maxX = Math.max(maxX, X[vi] + V[vi].w / 2); }
    if (!V.length) { minX = 0; maxX = 80; }
    const boxes = [], edges = [];
    for (let vi = 0; vi < V.length; vi++) {
      const v = V[vi];
      v.x = X[vi] - v.w / 2 - minX; v.y = rowY[L[vi]];
      if (v.kind !== "dummy") boxes.push(v);
    }
    const portX = (v, k, n) => v.x + (v.w * (k + 1)) / (n + 1);
    for (const [name, ch] of chains) {
      const s = V[ch.src];
      const start = [portX(s, ch.port, Math.max(1, s.outs.length)), s.y + s.h];
      const label = typeLabel(valueInfo(gi, name));
      ch.list.forEach(([c, port], i) => {
        const t = V[c], pts = [start];
        for (let j = 0; j < L[c] - L[ch.src] - 1; j++) {
          const d = V[ch.dummies[j]], l = L[ch.dummies[j]];
          pts.push([d.x + d.w / 2, rowY[l]], [d.x + d.w / 2, rowY[l] + rowH[l]]);
        }
        pts.push([portX(t, port, Math.max(1, t.ins.length)), t.y]);
        edges.push({ value: name, pts, label: i === 0 ? label : "", gi });
      });
    }
    return { w: maxX - minX, h: nLayers ? rowY[nLayers - 1] + rowH[nLayers - 1] : IO_H, boxes, edges };
  }

  /** Pool-adjacent-violators: the non-decreasing y minimising sum w*(y - t)^2. */
  function isotonic(t, w) {
    const val = [], wt = [], cnt = [];
    for (let i = 0; i < t.length; i++) {
      val.push(t[i]); wt.push(w[i]); cnt.push(1);
      while (val.length > 1 && val[val.length - 2] > val[val.length - 1]) {
        const b = val.length - 1, a = b - 1, ww = wt[a] + wt[b];
        val[a] = (val[a] * wt[a] + val[b] * wt[b]) / ww; wt[a] = ww; cnt[a] += cnt[b];
        val.pop(); wt.pop(); cnt.pop();
      }
    }
    const y = new Float64Array(t.length);
    let i = 0;
    for (let b = 0; b < val.length; b++) for (let c = 0; c < cnt[b]; c++) y[i++] = val[b];
    return y;
  }

  /** An expanded node: its subgraphs laid out side by side inside a box. */
  function clusterVertex(n, gi, ins, depth) {
    const subs = n.subgraphs.filter(([, sg]) => sg >= 0).map(([label, sg]) => ({ label, sg, lay: layoutGraph(sg, depth + 1) }));
    let w = 0, h = 0;
    for (const s of subs) { s.dx = w; w += s.lay.w + CLUSTER_PAD * 2 + 10; h = Math.max(h, s.lay.h); }
    w = Math.max(w - 10, textW(`${n.op}  ${n.id}`, 12, true) + 2 * PAD + 20);
    return { kind: "cluster", id: n.id, node: n, gi, w: w, h: CLUSTER_HEAD + SUB_LABEL + h + CLUSTER_PAD * 2, subs, outs: n.outputs, ins };
  }

  // ---- the flat scene: absolute boxes and edges, a grid for culling -----------------------------
  let scene = null;
  function buildScene() {
    const t = performance.now();
    const root = layoutGraph(0, 0);
    const boxes = [], edges = [];
    const add = (lay, ox, oy) => {
      for (const b of lay.boxes) {
        const box = { ...b, x: b.x + ox, y: b.y + oy, index: boxes.length };
        boxes.push(box);
        if (b.kind === "cluster") {
          for (const s of b.subs) {
            s.ax = box.x + CLUSTER_PAD + s.dx; s.ay = box.y + CLUSTER_HEAD + SUB_LABEL;
            add(s.lay, s.ax, s.ay);
          }
        }
      }
      for (const e of lay.edges) edges.push({ ...e, pts: e.pts.map(([x, y]) => [x + ox, y + oy]), index: edges.length });
    };
    add(root, 0, 0);
    for (const e of edges) {
      let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      for (const [x, y] of e.pts) { x0 = Math.min(x0, x); y0 = Math.min(y0, y); x1 = Math.max(x1, x); y1 = Math.max(y1, y); }
      e.bb = [x0, y0, x1 + (e.label ? textW(e.label, 9) + 4 : 0), y1];
    }
    const byId = new Map(boxes.map((b) => [b.id, b]));
    scene = { boxes, edges, byId, w: root.w, h: root.h, grid: gridIndex(boxes, edges), layoutMs: performance.now() - t };
    return scene;
  }
  const CELL = 400;
  function gridIndex(boxes, edges) {
    const cells = new Map();
    const put = (x0, y0, x1, y1, item) => {
      for (let cx = Math.floor(x0 / CELL); cx <= Math.floor(x1 / CELL); cx++)
        for (let cy = Math.floor(y0 / CELL); cy <= Math.floor(y1 / CELL); cy++) {
          const k = cx + "," + cy;
          let c = cells.get(k);
          if (!c) cells.set(k, (c = { b: [], e: [] }));
          item.box ? c.b.push(item.i) : c.e.push(item.i);
        }
    };
    boxes.forEach((b, i) => put(b.x, b.y, b.x + b.w, b.y + b.h, { box: true, i }));
    edges.forEach((e, i) => put(e.bb[0], e.bb[1], e.bb[2], e.bb[3], { box: false, i }));
    return cells;
  }
  function visibleItems(margin) {
    const stage = $("stage");
    const W = stage.clientWidth, H = stage.clientHeight;
    const x0 = (-state.tx) / state.k - margin * W / state.k, y0 = (-state.ty) / state.k - margin * H / state.k;
    const x1 = (W - state.tx) / state.k + margin * W / state.k, y1 = (H - state.ty) / state.k + margin * H / state.k;
    const bs = new Set(), es = new Set();
    const cx0 = Math.floor(x0 / CELL), cx1 = Math.floor(x1 / CELL), cy0 = Math.floor(y0 / CELL), cy1 = Math.floor(y1 / CELL);
    if ((cx1 - cx0 + 1) * (cy1 - cy0 + 1) > scene.grid.size * 2) { // zoomed far out: everything
      scene.boxes.forEach((b, i) => { if (b.x < x1 && b.x + b.w > x0 && b.y < y1 && b.y + b.h > y0) bs.add(i); });
      scene.edges.forEach((e, i) => { if (e.bb[0] < x1 && e.bb[2] > x0 && e.bb[1] < y1 && e.bb[3] > y0) es.add(i); });
      return { bs, es };
    }
    for (let cx = cx0; cx <= cx1; cx++)
      for (let cy = cy0; cy <= cy1; cy++) {
        const c = scene.grid.get(cx + "," + cy);
        if (!c) continue;
        for (const i of c.b) { const b = scene.boxes[i]; if (b.x < x1 && b.x + b.w > x0 && b.y < y1 && b.y + b.h > y0) bs.add(i); }
        for (const i of c.e) { const e = scene.edges[i]; if (e.bb[0] < x1 && e.bb[2] > x0 && e.bb[1] < y1 && e.bb[3] > y0) es.add(i); }
      }
    return { bs, es };
  }

  // ---- colours ----------------------------------------------------------------------------------
  let maxTime = 0;
  for (const n of GRAPHS[0].nodes) if (n.time > maxTime) maxTime = n.time;
  const ramp = (stops, t) => {
    t = Math.max(0, Math.min(1, t));
    const f = t * (stops.length - 1), i = Math.min(stops.length - 2, Math.floor(f)), u = f - i;
    const a = stops[i], b = stops[i + 1];
    return `rgb(${a.map((c, j) => Math.round(c + (b[j] - c) * u)).join(",")})`;
  };
  const HEAT = [[49, 54, 149], [116, 173, 209], [254, 224, 144], [244, 109, 67], [165, 0, 38]];
  const ERR = [[26, 152, 80], [166, 217, 106], [254, 224, 139], [244, 109, 67], [165, 0, 38]];
  function errNumber(e) { return typeof e === "string" ? Infinity : e; }
  function headColour(box) {
    if (box.kind !== "node" && box.kind !== "cluster") return "#eef1f5";
    const n = box.node;
    if (state.colour === "time" && box.gi === 0) return n.time === undefined ? "#bdbdbd" : ramp(HEAT, Math.sqrt(n.time / (maxTime || 1)));
    if (state.colour === "error" && box.gi === 0) {
      if (n.error === undefined) return "#bdbdbd";
      const e = errNumber(n.error);
      return ramp(ERR, e <= 0 ? 0 : (Math.log10(e) + 7) / 6); // 1e-7 green .. 1e-1 red
    }
    if (state.colour !== "op" && box.gi !== 0) return "#bdbdbd";
    return FAMILY_COLOURS[n.family] || FAMILY_COLOURS.other;
  }

  /** Whether white text on ``col`` would be hard to read (the heat scales' pale middle). */
  function isLight(col) {
    const m = /rgb\((\d+),(\d+),(\d+)\)/.exec(col);
    if (!m) return col === "#bdbdbd" || col === "#eef1f5";
    return 0.299 * m[1] + 0.587 * m[2] + 0.114 * m[3] > 150;
  }

  // ---- drawing ----------------------------------------------------------------------------------
  const drawn = { boxes: new Map(), edges: new Map() };
  function el(tag, attrs, parent) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, cls, s) { const t = el("text", { x, y, class: cls }, parent); t.textContent = s; return t; }
  function fitText(s, w, px) { const max = Math.floor(w / (px * 0.6)); return s.length > max ? s.slice(0, Math.max(1, max - 1)) + "…" : s; }

  function boxElement(b) {
    const g = el("g", { transform: `translate(${b.x},${b.y})` });
    if (b.kind === "input" || b.kind === "output") {
      g.setAttribute("class", "io");
      g.setAttribute(`data-${b.kind}`, b.value);
      g.setAttribute("data-box", b.id);
      el("rect", { class: "pill", width: b.w, height: b.h, rx: b.h / 2 }, g);
      text(g, b.w / 2, 16, "", fitText(b.value, b.w - 10, 11)).setAttribute("text-anchor", "middle");
    } else {
      const n = b.node;
      g.setAttribute("class", "node");
      g.setAttribute("data-node", n.id);
      el("title", {}, g).textContent = `${n.op} ${n.id}`;
      if (b.kind === "cluster") {
        g.setAttribute("data-expanded", "1");
        el("rect", { class: "cluster-body", width: b.w, height: b.h, rx: 6 }, g);
        el("rect", { class: "head", width: b.w, height: HEAD, rx: 6, fill: headColour(b) }, g);
        const op = text(g, PAD, 15, "op", `${n.op}  ${n.id}`);
        if (isLight(headColour(b))) op.style.fill = "#222";
        for (const s of b.subs) text(g, CLUSTER_PAD + s.dx, CLUSTER_HEAD + 11, "cluster-label", s.label);
      } else {
        el("rect", { class: "body", width: b.w, height: b.h, rx: 4 }, g);
        el("rect", { class: "head", width: b.w, height: HEAD, rx: 4, fill: headColour(b) }, g);
        if (b.face.lines.length) el("rect", { class: "head", y: HEAD - 4, width: b.w, height: 4, fill: headColour(b) }, g);
        const op = text(g, PAD, 15, "op", fitText(n.op, b.w - 2 * PAD - (b.face.inits ? 24 : 0) - (n.subgraphs ? 18 : 0), 12));
        if (isLight(headColour(b))) op.style.fill = "#222";
        b.face.lines.forEach((l, i) => text(g, PAD, HEAD + 12 + i * LINE, l.init ? "line init" : "line", fitText(l.text, b.w - 2 * PAD, 10)));
        if (b.face.inits) {
          const bx = b.w - 22 - (n.subgraphs ? 18 : 0);
          el("rect", { class: "badge", x: bx, y: 4, width: 18, height: 14, rx: 3 }, g).appendChild(document.createElementNS(SVGNS, "title")).textContent = `${b.face.inits} initializer(s) folded in`;
          text(g, bx + 9, 14, "badge-text", "W" + (b.face.inits > 1 ? b.face.inits : "")).setAttribute("text-anchor", "middle");
        }
      }
      if (n.subgraphs) {
        const tx = b.w - 17;
        const t = el("rect", { class: "toggle", x: tx, y: 4, width: 14, height: 14, rx: 2, "data-toggle": n.id }, g);
        el("title", {}, t).textContent = state.expanded.has(n.id) ? "collapse" : "expand the subgraph in place";
        text(g, tx + 7, 15.5, "toggle-text", state.expanded.has(n.id) ? "−" : "+").setAttribute("text-anchor", "middle");
      }
      const bad = nonFinite(n.outputs, b.gi);
      if (bad) {
        // "⚠" where non-finite values start: outputs have them, inputs have none
        const origin = !nonFinite(n.inputs, b.gi);
        const t = text(g, b.w, -3, origin ? "flag nan-flag origin" : "flag nan-flag", origin ? "⚠ " + bad : bad);
        t.setAttribute("text-anchor", "end");
      }
      const metric = metricText(n, b.gi);
      if (metric) {
        const right = b.w - 4 - (b.face && b.face.inits ? 24 : 0) - (n.subgraphs ? 18 : 0);
        const t = text(g, right, 14.5, "metric", metric);
        t.setAttribute("text-anchor", "end");
        t.style.fill = isLight(headColour(b)) ? "#222" : "#fff";
      }
      if (DOC.compare && DOC.compare.first === n.id) {
        g.classList.add("diverged");
        text(g, 0, -4, "flag", "first divergence");
      }
    }
    if (state.selected === b.id) g.classList.add("selected");
    if (state.hits.length && state.hits[state.hit] === b.id) g.classList.add("hit");
    return g;
  }
  /** "NaN ×k" / "inf ×k" when the run gave any of these values such elements. */
  function nonFinite(names, gi) {
    let nan = 0, inf = 0;
    for (const o of names) {
      const v = o && valueInfo(gi, o), r = v && v.run;
      if (r) { nan += r.nan || 0; inf += r.inf || 0; }
    }
    return nan ? `NaN ×${nan}` : inf ? `inf ×${inf}` : "";
  }
  function metricText(n, gi) {
    if (gi !== 0) return "";
    if (state.colour === "time" && n.time !== undefined) return `${fmt(n.time)} µs`;
    if (state.colour === "error" && n.error !== undefined) return `err ${fmt(n.error)}`;
    return "";
  }
  function edgePath(pts) {
    let d = `M${pts[0][0]},${pts[0][1]}`;
    for (let i = 1; i < pts.length; i++) {
      const [x0, y0] = pts[i - 1], [x1, y1] = pts[i];
      if (x0 === x1) d += `L${x1},${y1}`;
      else { const my = (y0 + y1) / 2; d += `C${x0},${my} ${x1},${my} ${x1},${y1}`; }
    }
    return d;
  }
  function edgeElement(e) {
    const g = el("g", { class: "edge", "data-edge": e.value, "data-graph": e.gi });
    if (state.selected) { const n = nodeById.get(state.selected); if (n && (n.node.inputs.includes(e.value) || n.node.outputs.includes(e.value))) g.classList.add("lit"); }
    el("title", {}, g).textContent = `${e.value}\n${typeLabel(valueInfo(e.gi, e.value)) || "type unknown"}`;
    const d = edgePath(e.pts);
    el("path", { class: "hit-area", d }, g); // wide and invisible: thin lines are hard to click
    el("path", { d }, g);
    if (e.label) text(g, e.pts[0][0] + 4, e.pts[0][1] + 11, "", e.label);
    return g;
  }

  let pending = false;
  function schedule() { if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; render(); }); } }
  function render() {
    const vp = $("viewport");
    vp.setAttribute("transform", `translate(${state.tx},${state.ty}) scale(${state.k})`);
    $("svg").classList.toggle("low", state.k < 0.4);
    const { bs, es } = visibleItems(0.5);
    const wantCanvas = bs.size > SVG_LIMIT;
    if (wantCanvas) { clearSvg(); state.mode = "canvas"; drawCanvas(bs, es); return; }
    if (state.mode === "canvas") { clearCanvas(); state.mode = "svg"; }
    sync(drawn.boxes, bs, scene.boxes, (b) => boxElement(b), (b) => (b.kind === "cluster" ? $("clusters") : $("boxes")));
    sync(drawn.edges, es, scene.edges, edgeElement, () => $("edges"));
    if (state.selected) marks();
  }
  function sync(map, want, items, make, parentOf) {
    for (const [i, e] of map) if (!want.has(i)) { e.remove(); map.delete(i); }
    for (const i of want) if (!map.has(i)) { const e = make(items[i]); map.set(i, e); parentOf(items[i]).appendChild(e); }
  }
  function clearSvg() { for (const m of [drawn.boxes, drawn.edges]) { for (const e of m.values()) e.remove(); m.clear(); } }
  function redrawAll() { clearSvg(); render(); }
  function clearCanvas() { const c = $("overview"), ctx = c.getContext("2d"); ctx.setTransform(1, 0, 0, 1, 0, 0); ctx.clearRect(0, 0, c.width, c.height); }
  function drawCanvas(bs, es) {
    const c = $("overview"), stage = $("stage"), dpr = window.devicePixelRatio || 1;
    const W = stage.clientWidth, H = stage.clientHeight;
    if (c.width !== W * dpr || c.height !== H * dpr) { c.width = W * dpr; c.height = H * dpr; }
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.setTransform(dpr * state.k, 0, 0, dpr * state.k, dpr * state.tx, dpr * state.ty);
    ctx.strokeStyle = "#9a9a9a"; ctx.lineWidth = 1 / state.k;
    ctx.beginPath();
    for (const i of es) { const p = scene.edges[i].pts; ctx.moveTo(p[0][0], p[0][1]); for (let j = 1; j < p.length; j++) ctx.lineTo(p[j][0], p[j][1]); }
    ctx.stroke();
    const byColour = new Map();
    for (const i of bs) { const b = scene.boxes[i], col = headColour(b); if (!byColour.has(col)) byColour.set(col, []); byColour.get(col).push(b); }
    for (const [col, list] of byColour) { ctx.fillStyle = col; for (const b of list) ctx.fillRect(b.x, b.y, b.w, b.h); }
    const sel = state.selected && scene.byId.get(state.selected);
    if (sel) { ctx.strokeStyle = "#ff8f00"; ctx.lineWidth = 4 / state.k; ctx.strokeRect(sel.x, sel.y, sel.w, sel.h); }
  }

  // ---- view: pan, zoom, fit, centre -------------------------------------------------------------
  function fit() {
    const stage = $("stage"), W = stage.clientWidth, H = stage.clientHeight, m = 30;
    const k = Math.min((W - 2 * m) / Math.max(scene.w, 1), (H - 2 * m) / Math.max(scene.h, 1), 1.5);
    state.k = k; state.tx = (W - scene.w * k) / 2; state.ty = Math.max(m, (H - scene.h * k) / 2);
    render();
  }
  /** Fit when that stays readable; otherwise the top of the graph at a readable zoom. */
  function initialView() {
    fit();
    if (state.k >= 0.6) return;
    const stage = $("stage"), W = stage.clientWidth;
    state.k = Math.min(1, Math.max(0.6, (W - 60) / Math.max(scene.w, 1)));
    state.tx = scene.w * state.k < W ? (W - scene.w * state.k) / 2 : 30;
    state.ty = 30;
  }
  function zoomAt(f, sx, sy) {
    const k = Math.max(0.01, Math.min(8, state.k * f));
    state.tx = sx - ((sx - state.tx) * k) / state.k; state.ty = sy - ((sy - state.ty) * k) / state.k; state.k = k;
    schedule();
  }
  function centreOn(id, minZoom) {
    const b = scene.byId.get(id);
    if (!b) return false;
    const stage = $("stage");
    if (minZoom && state.k < minZoom) state.k = minZoom;
    if (b.w * state.k > stage.clientWidth * 0.9) state.k = (stage.clientWidth * 0.9) / b.w;
    state.tx = stage.clientWidth / 2 - (b.x + b.w / 2) * state.k;
    state.ty = stage.clientHeight / 2 - (b.y + Math.min(b.h, stage.clientHeight / state.k * 0.8) / 2) * state.k;
    render();
    return true;
  }

  // ---- expansion --------------------------------------------------------------------------------
  function toggle(id, open) {
    const entry = nodeById.get(id);
    if (!entry || !entry.node.subgraphs) return false;
    const before = scene.byId.get(id);
    const sx = before ? before.x * state.k + state.tx : null, sy = before ? before.y * state.k + state.ty : null;
    const want = open === undefined ? !state.expanded.has(id) : open;
    if (want) state.expanded.add(id); else state.expanded.delete(id);
    relayout();
    const after = scene.byId.get(id);
    if (after && sx !== null) { state.tx = sx - after.x * state.k; state.ty = sy - after.y * state.k; }
    redrawAll();
    if (state.selected === id) showNode(id);
    return true;
  }
  function relayout() { buildScene(); }
  /** Opens every subgraph, or closes them all when all are open. */
  function expandAll() {
    const holders = [...nodeById.values()].filter((x) => x.node.subgraphs).map((x) => x.node.id);
    const open = holders.some((id) => !state.expanded.has(id));
    for (const id of holders) if (open) state.expanded.add(id); else state.expanded.delete(id);
    relayout();
    fit();
    redrawAll();
  }
  /** Expands the nodes that hold node id's graph so that it is drawn. */
  function reveal(id) {
    const chain = [];
    let gi = nodeById.get(id) ? nodeById.get(id).g : 0;
    while (gi > 0 && parentNode.has(gi)) { const p = parentNode.get(gi); chain.push(p); gi = nodeById.get(p).g; }
    let changed = false;
    for (const p of chain) if (!state.expanded.has(p)) { state.expanded.add(p); changed = true; }
    if (changed) { relayout(); clearSvg(); }
  }

  // ---- selection and the panel ------------------------------------------------------------------
  function select(id, centre) {
    state.selected = id;
    if (nodeById.has(id)) { reveal(id); showNode(id); }
    else if (id && (id.startsWith("input:") || id.startsWith("output:"))) showIo(id);
    if (centre) centreOn(id, 0.8);
    else render();
    marks();
  }
  /** Selection, search hit and the selected node's edges on what is drawn now. */
  function marks() {
    const hit = state.hits.length && state.hit >= 0 ? state.hits[state.hit] : null;
    for (const [i, e] of drawn.boxes) {
      const id = scene.boxes[i].id;
      e.classList.toggle("selected", id === state.selected);
      e.classList.toggle("hit", id === hit && id !== state.selected);
    }
    const n = nodeById.get(state.selected);
    const lit = new Set(n ? [...n.node.inputs, ...n.node.outputs] : []);
    for (const e of drawn.edges.values()) e.classList.toggle("lit", lit.has(e.getAttribute("data-edge")));
  }
  function statsHtml(s, title) {
    if (!s) return "";
    if (s.error) return `<div class="bad">${esc(s.error)}</div>`;
    if (s.kind) return `<div class="stats">${title}: ${esc(s.kind)}</div>`;
    let h = `<div class="stats"><b>${title}</b> ${esc(s.dtype)} ⟨${dims(s.shape)}⟩`;
    if (s.min !== undefined) h += `<br>min ${fmt(s.min)} · max ${fmt(s.max)}`;
    if (s.mean !== undefined) h += `<br>mean ${fmt(s.mean)} · std ${fmt(s.std)}`;
    if (s.nan !== undefined) h += `<br><span class="${s.nan ? "bad" : ""}">NaN ${s.nan}</span>${s.inf ? ` · <span class="bad">inf ${s.inf}</span>` : ""}`;
    if (s.zeros !== undefined) h += ` · zeros ${fmt(s.zeros * 100)}%`;
    if (s.sampled) h += `<br><span class="sub">mean, std, histogram from ${s.sampled} samples</span>`;
    if (s.values) h += `<br><span class="mono">[${esc(s.values.map(fmt).join(", "))}]</span>`;
    h += "</div>";
    if (s.hist && !s.values) h += histogram(s.hist, s.hist_range);
    return h;
  }
  function histogram(counts, range) {
    const W = 300, H = 44, max = Math.max(...counts, 1), bw = W / counts.length;
    let bars = "";
    counts.forEach((c, i) => { const h = c ? Math.max(1, (Math.sqrt(c) / Math.sqrt(max)) * (H - 2)) : 0; bars += `<rect x="${i * bw + 0.5}" y="${H - h}" width="${bw - 1}" height="${h}" fill="#5b7fb8"><title>${c}</title></rect>`; });
    return `<svg class="hist" width="${W}" height="${H + 12}" viewBox="0 0 ${W} ${H + 12}">${bars}<text x="0" y="${H + 11}" font-size="9" fill="#666">${esc(fmt(range[0]))}</text><text x="${W}" y="${H + 11}" font-size="9" fill="#666" text-anchor="end">${esc(fmt(range[1]))}</text></svg>`;
  }
  function errorHtml(e) {
    if (!e) return "";
    const bad = e.mismatch > 0;
    let h = `<div class="${bad ? "bad" : "ok"}">vs ${esc(DOC.compare.against)}: `;
    if (e.max_abs !== undefined) h += `max |Δ| ${fmt(e.max_abs)} · rel ${fmt(e.rel)} · `;
    h += `${fmt((e.mismatch || 0) * 100)}% outside tolerance${e.note ? " · " + esc(e.note) : ""}</div>`;
    return h;
  }
  function valueHtml(gi, name, role) {
    if (!name) return `<div class="value sub">(${role} omitted)</div>`;
    const v = valueInfo(gi, name) || {};
    let h = `<div class="value"><span class="name" data-jump="${esc(name)}">${esc(name)}</span>`;
    h += `<div class="mono">${esc(typeLabel(v) || "type unknown")}${v.init ? " · initializer" : ""}${v.external ? " (external data)" : ""}</div>`;
    if (v.stats) h += statsHtml(v.stats, "weights");
    if (v.run) h += statsHtml(v.run, "run");
    if (v.error) h += errorHtml(v.error);
    if (v.doc) h += `<div class="sub">${esc(v.doc)}</div>`;
    return h + "</div>";
  }
  function showNode(id) {
    const { node: n, g: gi } = nodeById.get(id);
    let h = `<h2>${esc(n.domain ? n.domain + "::" : "")}${esc(n.op)}</h2><table>`;
    h += `<tr><td>name</td><td class="mono">${esc(n.name || n.id)}</td></tr>`;
    h += `<tr><td>domain</td><td>${esc(n.domain || "ai.onnx")}</td></tr>`;
    h += `<tr><td>opset</td><td>${n.version == null ? "?" : n.version}</td></tr>`;
    h += `<tr><td>graph</td><td>${esc(GRAPHS[gi].name)}</td></tr>`;
    if (n.time !== undefined) h += `<tr><td>time</td><td>${fmt(n.time)} µs</td></tr>`;
    if (n.error !== undefined) h += `<tr><td>error</td><td>${fmt(n.error)} (relative)</td></tr>`;
    h += "</table>";
    if (DOC.compare && DOC.compare.first === id) h += `<div class="bad">the first node whose output differs while its inputs agree</div>`;
    if (n.doc) h += `<p class="sub">${esc(n.doc)}</p>`;
    if (n.attrs.length) {
      h += `<h3>attributes</h3><table class="attrs">`;
      for (const [name, type, value] of n.attrs) h += `<tr><td>${esc(name)}</td><td class="mono" title="${esc(type)}">${esc(value)}</td></tr>`;
      h += "</table>";
    }
    if (n.subgraphs) {
      h += `<h3>subgraphs</h3>`;
      for (const [label, sg] of n.subgraphs) h += `<div>${esc(label)} <span class="sub">${sg >= 0 ? GRAPHS[sg].nodes.length + " nodes" : "(recursive)"}</span></div>`;
      h += `<button data-toggle-panel="${esc(id)}">${state.expanded.has(id) ? "collapse" : "expand in place"}</button>`;
    }
    h += `<h3>inputs</h3>` + (n.inputs.length ? n.inputs.map((i) => valueHtml(gi, i, "input")).join("") : `<div class="sub">none</div>`);
    h += `<h3>outputs</h3>` + n.outputs.map((o) => valueHtml(gi, o, "output")).join("");
    setPanel(h, "node");
  }
  /** A value: its type, statistics, error, and the nodes that make and read it. */
  function showValue(gi, name) {
    const link = (id) => `<div><span class="name" data-jump-node="${esc(id)}">${esc(id)}</span> <span class="sub">${esc(nodeById.get(id).node.op)}</span></div>`;
    const producer = producerOf[gi].get(name);
    const users = GRAPHS[gi].nodes.filter((n) => n.inputs.includes(name) || (n.captures || []).includes(name)).map((n) => n.id);
    let h = `<h2>value</h2>${valueHtml(gi, name, "value")}`;
    h += `<h3>made by</h3>${producer ? link(producer) : `<div class="sub">graph input or initializer</div>`}`;
    h += `<h3>read by</h3>${users.length ? users.map(link).join("") : `<div class="sub">nobody (a graph output)</div>`}`;
    setPanel(h, "value");
  }
  function showIo(id) {
    const [kind, gi, ...rest] = id.split(":");
    const name = rest.join(":");
    setPanel(`<h2>graph ${esc(kind)}</h2>${valueHtml(Number(gi), name, kind)}`, "io");
  }
  function showModel() {
    const m = DOC.model;
    let h = `<h2>${esc(m.name || "model")}</h2><table>`;
    const rows = [["producer", m.producer], ["IR version", m.ir_version], ["domain", m.domain], ["model version", m.model_version], ["nodes", m.nodes], ["initializers", m.initializers]];
    for (const [k, v] of rows) if (v !== "" && v !== undefined && v !== null) h += `<tr><td>${k}</td><td>${esc(v)}</td></tr>`;
    h += "</table>";
    if (m.doc) h += `<p class="sub">${esc(m.doc)}</p>`;
    h += `<h3>opsets</h3><table>` + Object.entries(m.opsets).map(([d, v]) => `<tr><td>${esc(d)}</td><td>${v}</td></tr>`).join("") + "</table>";
    if (Object.keys(m.metadata).length) h += `<h3>metadata</h3><table>` + Object.entries(m.metadata).map(([k, v]) => `<tr><td>${esc(k)}</td><td class="mono">${esc(v)}</td></tr>`).join("") + "</table>";
    if (m.functions.length) h += `<h3>functions</h3>` + m.functions.map((f) => `<div class="mono">${esc(f)}</div>`).join("");
    h += `<h3>inputs</h3>` + GRAPHS[0].inputs.map((i) => valueHtml(0, i, "input")).join("");
    h += `<h3>outputs</h3>` + GRAPHS[0].outputs.map((o) => valueHtml(0, o, "output")).join("");
    if (DOC.run) {
      h += `<h3>run</h3><div class="sub">values and times from one onyx run (unoptimized graph) on inputs ${esc(Object.entries(DOC.run.inputs).map(([k, s]) => `${k} ⟨${s.join("×")}⟩`).join(", "))}</div>`;
      h += topList("slowest nodes", (n) => n.time, (n) => `${fmt(n.time)} µs`);
    }
    if (DOC.compare) {
      const c = DOC.compare;
      h += `<h3>comparison</h3><div>against ${esc(c.against)}: ${c.compared} values compared (|Δ| ≤ ${c.atol} + ${c.rtol}·|ref|)</div>`;
      h += c.first ? `<div class="bad">first divergence: <span class="name" data-jump-node="${esc(c.first)}">${esc(c.first)}</span></div>` : `<div class="ok">all compared values agree</div>`;
      h += topList("largest errors", (n) => errNumber(n.error), (n) => `rel ${fmt(n.error)}`);
    }
    for (const note of DOC.notes || []) h += `<div class="bad">${esc(note)}</div>`;
    setPanel(h, "model");
  }
  /** The main graph's top 10 nodes by ``key`` (those that have one), each a link. */
  function topList(title, key, label) {
    const nodes = GRAPHS[0].nodes.filter((n) => key(n) !== undefined && key(n) > 0);
    if (!nodes.length) return "";
    nodes.sort((a, b) => key(b) - key(a));
    const total = title === "slowest nodes" ? ` <span class="sub">(all nodes: ${fmt(nodes.reduce((t, n) => t + n.time, 0))} µs)</span>` : "";
    return `<div class="top"><b>${title}</b>${total}<table>` + nodes.slice(0, 10).map((n) =>
      `<tr><td class="mono">${esc(label(n))}</td><td><span class="name" data-jump-node="${esc(n.id)}">${esc(n.id)}</span> <span class="sub">${esc(n.op)}</span></td></tr>`).join("") + "</table></div>";
  }
  function setPanel(h, kind) { const p = $("panel"); p.innerHTML = h; p.dataset.kind = kind; p.scrollTop = 0; }

  // ---- search -----------------------------------------------------------------------------------
  const index = [];   // [text to match, target id, label, kind]
  for (const [id, { node: n, g }] of nodeById) {
    index.push([`${id}\n${n.name || ""}\n${n.op}`.toLowerCase(), id, id, n.op + (g ? " · " + GRAPHS[g].name : "")]);
    for (const o of n.outputs) if (o) index.push([o.toLowerCase(), id, o, "value → " + id]);
  }
  GRAPHS.forEach((g, gi) => {
    for (const i of g.inputs) index.push([i.toLowerCase(), `input:${gi}:${i}`, i, "graph input"]);
    const firstUser = new Map();
    for (const n of g.nodes) for (const i of n.inputs) if (i && !firstUser.has(i)) firstUser.set(i, n.id);
    for (const [name, v] of Object.entries(g.values)) {
      if (v.init && firstUser.has(name)) index.push([name.toLowerCase(), firstUser.get(name), name, "initializer → " + firstUser.get(name)]);
    }
  });
  function search(q) {
    q = q.trim().toLowerCase();
    const seen = new Set(), hits = [];
    if (q) for (const [t, id, label, kind] of index) {
      if (!t.includes(q) || seen.has(id + label)) continue;
      seen.add(id + label); hits.push({ id, label, kind, exact: t.split("\n").includes(q) });
      if (hits.length >= 500) break;
    }
    hits.sort((a, b) => b.exact - a.exact);
    state.hits = hits.map((h) => h.id); state.hit = -1;
    $("hits").textContent = q ? `${hits.length}${hits.length >= 500 ? "+" : ""}` : "";
    const r = $("results");
    r.innerHTML = hits.slice(0, 50).map((h, i) => `<div data-hit="${i}">${esc(h.label)}<small>${esc(h.kind)}</small></div>`).join("");
    r.hidden = !hits.length;
    return state.hits.slice();
  }
  function jump(i) {
    if (!state.hits.length) return null;
    state.hit = ((i % state.hits.length) + state.hits.length) % state.hits.length;
    const id = state.hits[state.hit];
    $("hits").textContent = `${state.hit + 1}/${state.hits.length}`;
    for (const e of $("results").children) e.classList.toggle("on", Number(e.dataset.hit) === state.hit);
    select(id, true);
    return id;
  }

  // ---- legend -----------------------------------------------------------------------------------
  function legend() {
    const l = $("legend");
    if (state.colour === "op") {
      const used = new Set();
      for (const { node } of nodeById.values()) used.add(node.family);
      l.innerHTML = [...used].filter((f) => FAMILY_COLOURS[f]).map((f) => `<span class="sw" style="background:${FAMILY_COLOURS[f]}"></span>${f}`).join("");
    } else if (state.colour === "time") {
      l.innerHTML = maxTime ? `time 0 <svg class="ramp">${rampRects(HEAT)}</svg> ${fmt(maxTime)} µs (√ scale)` : "no times: run with --run";
    } else {
      l.innerHTML = DOC.compare ? `relative error 1e-7 <svg class="ramp">${rampRects(ERR)}</svg> 1e-1` : "no errors: run with --compare";
    }
  }
  const rampRects = (stops) => Array.from({ length: 24 }, (_, i) => `<rect x="${i * 5}" width="5.5" height="10" fill="${ramp(stops, i / 23)}"/>`).join("");

  // ---- events -----------------------------------------------------------------------------------
  function hook() {
    const stage = $("stage");
    let drag = null;
    stage.addEventListener("mousedown", (e) => {
      if (e.button !== 0) return;
      drag = { x: e.clientX, y: e.clientY, tx: state.tx, ty: state.ty, moved: false };
      stage.classList.add("dragging");
    });
    window.addEventListener("mousemove", (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      state.tx = drag.tx + dx; state.ty = drag.ty + dy;
      schedule();
    });
    window.addEventListener("mouseup", () => { stage.classList.remove("dragging"); setTimeout(() => { drag = null; }, 0); });
    stage.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = stage.getBoundingClientRect();
      zoomAt(Math.exp(-e.deltaY * (e.ctrlKey ? 0.01 : 0.0015)), e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    stage.addEventListener("click", (e) => {
      if (drag && drag.moved) return;
      const t = e.target.closest("[data-toggle]");
      if (t) { toggle(t.getAttribute("data-toggle")); return; }
      const n = e.target.closest("[data-node]");
      if (n) { select(n.getAttribute("data-node")); return; }
      const edge = e.target.closest("[data-edge]");
      if (edge) { showValue(Number(edge.getAttribute("data-graph")), edge.getAttribute("data-edge")); return; }
      const io = e.target.closest("[data-input],[data-output]");
      if (io) { select(io.getAttribute("data-box")); return; }
      if (state.mode === "canvas") { const b = boxAtScreen(e); if (b) { select(b.id, true); return; } }
      state.selected = null; redrawAll(); showModel();
    });
    stage.addEventListener("dblclick", (e) => {
      const n = e.target.closest("[data-node]");
      if (n) toggle(n.getAttribute("data-node"));
    });
    $("panel").addEventListener("click", (e) => {
      const j = e.target.closest("[data-jump]");
      if (j) { jumpToValue(j.getAttribute("data-jump")); return; }
      const jn = e.target.closest("[data-jump-node]");
      if (jn) { select(jn.getAttribute("data-jump-node"), true); return; }
      const t = e.target.closest("[data-toggle-panel]");
      if (t) toggle(t.getAttribute("data-toggle-panel"));
    });
    const box = $("search");
    box.addEventListener("input", () => search(box.value));
    box.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); if (state.hit < 0 && !state.hits.length) search(box.value); jump(state.hit + (e.shiftKey ? -1 : 1)); }
      else if (e.key === "Escape") { box.value = ""; search(""); box.blur(); }
      else if (e.key === "ArrowDown") { e.preventDefault(); jump(state.hit + 1); }
      else if (e.key === "ArrowUp") { e.preventDefault(); jump(state.hit - 1); }
    });
    $("results").addEventListener("mousedown", (e) => { const d = e.target.closest("[data-hit]"); if (d) { e.preventDefault(); jump(Number(d.dataset.hit)); } });
    box.addEventListener("blur", () => { setTimeout(() => { $("results").hidden = true; }, 150); });
    box.addEventListener("focus", () => { $("results").hidden = !state.hits.length; });
    $("fit").addEventListener("click", fit);
    $("model-info").addEventListener("click", showModel);
    $("help-button").addEventListener("click", () => { $("help").hidden = !$("help").hidden; });
    $("colour").addEventListener("change", (e) => setColour(e.target.value));
    $("diverge").addEventListener("click", () => select(DOC.compare.first, true));
    window.addEventListener("resize", schedule);
    window.addEventListener("keydown", (e) => {
      if (e.target.tagName === "INPUT" || e.target.tagName === "SELECT" || e.ctrlKey || e.metaKey || e.altKey) return;
      const stage = $("stage");
      if (e.key === "f") fit();
      else if (e.key === "/") { e.preventDefault(); box.focus(); box.select(); }
      else if (e.key === "Escape") { state.selected = null; state.hits = []; redrawAll(); showModel(); $("help").hidden = true; }
      else if (e.key === "+" || e.key === "=") zoomAt(1.25, stage.clientWidth / 2, stage.clientHeight / 2);
      else if (e.key === "-") zoomAt(0.8, stage.clientWidth / 2, stage.clientHeight / 2);
      else if (e.key === "e" && state.selected) toggle(state.selected);
      else if (e.key === "E") expandAll();
      else if (e.key === "m") showModel();
      else if (e.key === "?") $("help").hidden = !$("help").hidden;
    });
  }
  function boxAtScreen(e) {
    const r = $("stage").getBoundingClientRect();
    const x = (e.clientX - r.left - state.tx) / state.k, y = (e.clientY - r.top - state.ty) / state.k;
    let best = null;
    for (const b of scene.boxes) if (x >= b.x && x <= b.x + b.w && y >= b.y && y <= b.y + b.h && (!best || b.w * b.h < best.w * best.h)) best = b;
    return best;
  }
  function jumpToValue(name) {
    for (const [id, { node }] of nodeById) if (node.outputs.includes(name) && scene.byId.has(id)) return select(id, true);
    for (const b of scene.boxes) if (b.kind === "input" && b.value === name) return select(b.id, true);
    for (const [id, { node }] of nodeById) if (node.inputs.includes(name)) return select(id, true);
  }
  function setColour(mode) { state.colour = mode; $("colour").value = mode; legend(); redrawAll(); }

  // ---- start ------------------------------------------------------------------------------------
  const parsed = performance.now();
  $("title").textContent = `${DOC.model.name || "model"} · ${DOC.model.nodes} nodes`;
  if (DOC.compare && DOC.compare.first) $("diverge").hidden = false;
  buildScene();
  hook();
  state.colour = DOC.compare ? "error" : "op";
  $("colour").value = state.colour;
  legend();
  showModel();
  initialView();
  render();
  pending = false;

  window.onyxView = {
    /** Every node id of the current layout (expanded subgraphs included), once each. */
    index: () => scene.boxes.filter((b) => b.kind === "node" || b.kind === "cluster").map((b) => b.id),
    /** Node ids drawn right now as SVG elements. */
    rendered: () => [...document.querySelectorAll("#svg [data-node]")].map((e) => e.getAttribute("data-node")),
    mode: () => state.mode,
    view: () => ({ k: state.k, tx: state.tx, ty: state.ty }),
    box: (id) => { const b = scene.byId.get(id); return b && { x: b.x * state.k + state.tx, y: b.y * state.k + state.ty, w: b.w * state.k, h: b.h * state.k }; },
    fit, search, jump, select, toggle, expandAll, setColour, centreOn,
    zoom: (f) => zoomAt(f, $("stage").clientWidth / 2, $("stage").clientHeight / 2),
    pan: (dx, dy) => { state.tx += dx; state.ty += dy; render(); },
    timings: { parse: parsed - T0, layout: scene.layoutMs, total: performance.now() - T0 },
  };
  document.body.setAttribute("data-ready", "1");
})();
