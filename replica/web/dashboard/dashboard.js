/*
 * gfrep live replication dashboard: the browser side.
 *
 * gfcatalogd serves this page and talks to it over one WebSocket (./ws, JSON text frames,
 * server -> client only):
 *   history  once per connection: bytes per 0.1-s bin of every series, up to 5 minutes
 *   tick     every ~100 ms: the bins completed since the previous tick
 *   state    every 1 s: sites, routes, queue, replicas, policies, errors, totals
 *   streams  every ~100 ms while the page watches a node pair: its streams' bins ("reset":
 *            true first, with up to a minute of them); the page asks with {"streams": PAIR}
 * plus two JSON endpoints for the detail pane (./api/request?id=N, ./api/explain?path=P).
 *
 * Data model: each series ("route:kek->sdsc", "pair:kek1->sdsc1") is an array of bytes per bin,
 * all aligned on one shared timeline (store.times = end time of each bin in unix ms, oldest
 * first, at most MAX_POINTS bins). Messages only update that model and mark the graphs dirty;
 * the graphs are redrawn from it in a requestAnimationFrame callback at most every FRAME_MS, so a
 * burst of ticks costs one redraw and a hidden tab costs nothing.
 *
 * Test hooks: window.gfdash (tick counter, series names), data-points / data-last-mbps /
 * data-last-ms on every graph container, data-state on request rows, data-bytes on #total-bytes.
 */
'use strict';

(function () {
  const MAX_POINTS = 3000;    // bins kept per series: 5 minutes of 0.1-s bins
  const MAX_STREAM_POINTS = 600;  // per stream: the server keeps a minute
  const FRAME_MS = 100;       // redraw graphs at most this often
  const RECONNECT_MS = 1000;  // retry interval after the WebSocket closes
  const STALE_MS = 5000;      // an open socket silent this long (or a connect this slow) is dead
  const MAX_ERRORS = 50;      // errors listed
  const MAX_DETAIL_ROWS = 500;

  // The three graphs of a route row: title, moving-average window in bins, colour, and `step`:
  // plot every step-th bin (plus the newest). Averages change slowly, so the 1-s and 10-s graphs
  // lose nothing visible with 600 and 300 points instead of 3000, and redraw much faster.
  const ROUTE_VIEWS = [
    { title: '0.1 s', window: '0.1s', bins: 1, step: 1, color: '#4fc3f7' },
    { title: '1 s', window: '1s', bins: 10, step: 5, color: '#81c784' },
    { title: '10 s', window: '10s', bins: 100, step: 10, color: '#ffb74d' },
  ];
  // Capacity and ceiling are constant series with a value at the first and last row only
  // (null between, joined by connectSeparatedPoints): a 2-point dashed line, not 3000 points.
  const CAPACITY_STYLE = { color: '#8a94a6', strokePattern: [6, 4], strokeWidth: 1, connectSeparatedPoints: true };
  const CEILING_STYLE = { color: '#ff7043', strokePattern: [6, 4], strokeWidth: 1, connectSeparatedPoints: true };

  // ---------------------------------------------------------------------------------------------
  // Data model

  const store = {
    binMs: 100,
    times: [],           // end of each bin (unix ms), oldest first
    series: new Map(),   // series name -> bytes per bin, same length as times
    lastEndMs: null,     // end_ms of the newest bin, null before the first message
  };
  // The streams of the node pair the page watches ("task-ID#K" -> bytes per bin).
  const streamStore = { pair: '', binMs: 100, times: [], series: new Map(), lastEndMs: null };

  const gfdash = {
    ticks: 0,            // tick messages received (all connections)
    lastTickMs: 0,       // end_ms of the last tick
    series: [],          // series names known
    streams: [],         // stream series of the watched pair
    // Watch the streams of node pair "SRC->DST" (as picking it in the list does).
    watchStreams(pair) { selectStreamPair(pair, true); },
    // Last n bins of a series in Mbit/s (oldest first); for tests and the console.
    recentMbps(name, n) {
      const arr = store.series.get(name) || [];
      return arr.slice(Math.max(0, arr.length - (n || 10))).map((b) => b * mbpsPerByte());
    },
  };
  window.gfdash = gfdash;

  function mbpsPerByte() {
    return 8 / (store.binMs * 1000);  // bytes in one bin -> Mbit/s
  }

  // The last n values of arr (numbers), left-padded with zeros to length n.
  function alignTail(arr, n) {
    const out = new Array(n).fill(0);
    const m = Math.min(n, arr.length);
    for (let i = 0; i < m; i++) out[n - m + i] = Number(arr[arr.length - m + i]) || 0;
    return out;
  }

  // Replaces everything in store `st` (keeping at most `max` bins); series are aligned at
  // their end.
  function loadInto(st, binMs, endMs, series, max) {
    st.binMs = binMs > 0 ? binMs : 100;
    let n = 0;
    for (const name in series) n = Math.max(n, series[name].length);
    n = Math.min(n, max);
    st.times = [];
    for (let i = 0; i < n; i++) st.times.push(endMs - (n - 1 - i) * st.binMs);
    st.series = new Map();
    for (const name in series) st.series.set(name, alignTail(series[name], n));
    st.lastEndMs = endMs;
  }

  // Appends the bins that ended since the last ones to store `st`. How many is decided by the
  // clock (end_ms advanced by k bins -> k new bins), so series missing from `bins` and gaps
  // after a hiccup become zeros and every series stays aligned with st.times. Returns whether
  // a series was added.
  function appendInto(st, endMs, bins, max) {
    let n;
    if (st.lastEndMs === null) {  // bins before any history: start the timeline here
      n = 1;
      for (const name in bins) n = Math.max(n, bins[name].length);
    } else {
      n = Math.round((endMs - st.lastEndMs) / st.binMs);
    }
    if (!(n > 0)) return false;  // duplicate or out-of-date
    n = Math.min(n, max);

    const before = st.times.length;
    for (let i = 0; i < n; i++) st.times.push(endMs - (n - 1 - i) * st.binMs);
    for (const [name, arr] of st.series) {
      if (bins[name]) arr.push(...alignTail(bins[name], n));
      else for (let i = 0; i < n; i++) arr.push(0);
    }
    let added = false;
    for (const name in bins) {
      if (st.series.has(name)) continue;
      st.series.set(name, new Array(before).fill(0).concat(alignTail(bins[name], n)));
      added = true;
    }
    st.lastEndMs = endMs;

    const excess = st.times.length - max;
    if (excess > 0) {
      st.times.splice(0, excess);
      for (const arr of st.series.values()) arr.splice(0, excess);
    }
    return added;
  }

  // history: replaces everything (also after a reconnect).
  function loadHistory(msg) {
    loadInto(store, msg.bin_ms, msg.end_ms, msg.series || {}, MAX_POINTS);
    seriesChanged();
  }

  // tick: the bins completed since the last tick.
  function appendTick(msg) {
    if (appendInto(store, msg.end_ms, msg.bins || {}, MAX_POINTS)) seriesChanged();
  }

  // streams: the watched pair's streams (a reset replaces them); a stream quiet for the whole
  // window is dropped so that ended copies leave the graphs.
  function onStreams(msg) {
    if (msg.pair !== streamStore.pair) return;  // an answer for a pair no longer watched
    if (msg.reset) {
      loadInto(streamStore, msg.bin_ms, msg.end_ms, msg.series || {}, MAX_STREAM_POINTS);
      // The reply covers a whole minute: start the graphs a second before the first bytes.
      let first = streamStore.times.length;
      for (const arr of streamStore.series.values()) {
        const i = arr.findIndex((v) => v > 0);
        if (i >= 0) first = Math.min(first, i);
      }
      const drop = Math.max(0, Math.min(first, streamStore.times.length - 1) - 10);
      if (drop > 0) {
        streamStore.times.splice(0, drop);
        for (const arr of streamStore.series.values()) arr.splice(0, drop);
      }
    } else {
      appendInto(streamStore, msg.end_ms, msg.series || {}, MAX_STREAM_POINTS);
    }
    for (const [name, arr] of streamStore.series) {
      if (arr.every((v) => v === 0)) streamStore.series.delete(name);
    }
    gfdash.streams = Array.from(streamStore.series.keys()).sort();
    setText(document.getElementById('stream-count'), String(streamStore.series.size));
  }

  // The set of series names changed: publish it and make sure every route has a row.
  function seriesChanged() {
    gfdash.series = Array.from(store.series.keys());
    for (const name of gfdash.series) {
      if (name.startsWith('route:')) ensureRouteRow(name.slice('route:'.length));
    }
    updatePairChoices();
  }

  // ---------------------------------------------------------------------------------------------
  // Streams: the page watches one node pair's streams, the user's pick or, until there is one,
  // the pair that moved the most lately.

  const pairSelect = document.getElementById('stream-pair');
  let pairPicked = false;  // by the user (or a test): keep it

  function updatePairChoices() {
    const pairs = gfdash.series.filter((s) => s.startsWith('pair:')).map((s) => s.slice(5)).sort();
    const have = Array.from(pairSelect.options).map((o) => o.value).filter((v) => v);
    if (pairs.join('\n') !== have.join('\n')) {
      const current = streamStore.pair;
      pairSelect.textContent = '';
      if (!pairs.length) pairSelect.append(el('option', null, '(none yet)'));
      for (const p of pairs) {
        const o = el('option', null, p.replace('->', ' → '));
        o.value = p;
        pairSelect.append(o);
      }
      if (current) pairSelect.value = current;
    }
    if (!pairPicked) {
      let best = '', bestBytes = -1;
      for (const p of pairs) {
        const arr = store.series.get('pair:' + p) || [];
        let sum = 0;
        for (let i = Math.max(0, arr.length - 100); i < arr.length; i++) sum += arr[i];
        if (sum > bestBytes) { best = p; bestBytes = sum; }
      }
      if (best && best !== streamStore.pair) selectStreamPair(best, false);
    }
  }

  function selectStreamPair(pair, picked) {
    pairPicked = pairPicked || picked;
    if (pair === streamStore.pair) return;
    streamStore.pair = pair;
    streamStore.times = [];
    streamStore.series = new Map();
    streamStore.lastEndMs = null;
    gfdash.streams = [];
    if (pairSelect.value !== pair) pairSelect.value = pair;
    sendWatch();
    requestDraw();
  }

  pairSelect.addEventListener('change', () => selectStreamPair(pairSelect.value, true));

  function sendWatch() {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ streams: streamStore.pair }));
  }

  // ---------------------------------------------------------------------------------------------
  // Graphs (dygraphs). x values are unix ms numbers with a date ticker: the same date axis as
  // Date objects, without dygraphs cloning the whole data array on every update.

  const routeRows = new Map();  // "kek->sdsc" -> {row, meta, views, capacityBps, ceilingBps}
  const pairsView = {
    el: document.getElementById('pairs-graph'),
    legend: document.getElementById('pairs-legend'),
    title: '1 s', bins: 10, step: 5, graph: null, labelsKey: '',
  };

  // The three graphs of a route or of the streams panel (0.1-s bins, 1-s and 10-s averages),
  // appended to `parent`; `extra` is merged into each view.
  function makeGraphViews(parent, extra) {
    return ROUTE_VIEWS.map((spec) => {
      const div = el('div', 'graph');
      div.dataset.window = spec.window;
      div.dataset.points = '0';
      div.dataset.lastMbps = '0';
      div.dataset.lastMs = '0';
      parent.append(div);
      return Object.assign({ el: div, graph: null, labelsKey: '' }, spec, extra);
    });
  }

  // The streams' three graphs: one line per stream.
  const streamViews = makeGraphViews(document.getElementById('stream-graphs'), { color: null });

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }

  function ensureRouteRow(key) {
    let route = routeRows.get(key);
    if (route) return route;
    const container = document.getElementById('routes');
    const row = el('div', 'route-row');
    row.dataset.route = key;
    const head = el('div', 'route-head');
    head.append(el('span', 'route-name', key.replace('->', ' → ')));
    const meta = el('span', 'route-meta dim');
    head.append(meta);
    row.append(head);
    const graphs = el('div', 'graphs');
    const views = makeGraphViews(graphs, {});
    row.append(graphs);
    route = { row, meta, views, capacityBps: 0, ceilingBps: 0 };
    routeRows.set(key, route);

    // Keep rows sorted by route name.
    const empty = container.querySelector('.empty');
    if (empty) empty.remove();
    const next = Array.from(container.children).find((r) => r.dataset.route > key);
    container.insertBefore(row, next || null);
    requestDraw();
    return route;
  }

  function graphOptions(view, labels) {
    const opts = {
      labels,
      title: view.title,
      titleHeight: 18,
      includeZero: true,
      strokeWidth: 1.3,
      gridLineColor: '#2a323d',
      axisLineColor: '#4a5563',
      axisLabelFontSize: 11,
      digitsAfterDecimal: 1,
      labelsSeparateLines: true,
      legend: 'onmouseover',
      animatedZooms: false,
      colorSaturation: 0.65,
      colorValue: 0.95,
      axes: {
        x: {
          ticker: Dygraph.dateTicker,
          axisLabelFormatter: Dygraph.dateAxisLabelFormatter,
          valueFormatter: (ms) => new Date(ms).toLocaleTimeString([], { hour12: false }),
          pixelsPerLabel: 60,
        },
        y: { axisLabelWidth: 42 },
      },
      series: { capacity: CAPACITY_STYLE, ceiling: CEILING_STYLE },
    };
    if (view.color) opts.series[view.title] = { color: view.color };
    if (view.legend) {  // the pairs graph: a permanent legend below the graph
      opts.legend = 'always';
      opts.labelsDiv = view.legend;
      opts.labelsSeparateLines = false;
    }
    return opts;
  }

  // prefix[i] = sum of the first i bins (zeros if the series does not exist yet).
  function prefixSums(arr, n) {
    const prefix = new Float64Array(n + 1);
    if (arr) for (let i = 0; i < n; i++) prefix[i + 1] = prefix[i] + arr[i];
    return prefix;
  }

  // Mean of the `bins` bins ending at index i (fewer at the start of the window).
  function windowMean(prefix, i, bins) {
    const lo = Math.max(0, i + 1 - bins);
    return (prefix[i + 1] - prefix[lo]) / (i + 1 - lo);
  }

  // Hand rows to one graph and publish what it shows in data-* attributes.
  function plot(view, rows, labels, lastMbps) {
    const div = view.el;
    if (rows.length === 0) {  // dygraphs cannot show an empty data set
      if (view.graph) view.graph.destroy();
      view.graph = null;
      view.labelsKey = '';
    } else {
      const labelsKey = labels.join('\n');
      if (!view.graph) view.graph = new Dygraph(div, rows, graphOptions(view, labels));
      else if (labelsKey !== view.labelsKey) view.graph.updateOptions({ file: rows, labels });
      else view.graph.updateOptions({ file: rows });
      view.labelsKey = labelsKey;
    }
    div.dataset.points = String(rows.length);
    div.dataset.lastMbps = String(Math.round(lastMbps * 1000) / 1000);
    div.dataset.lastMs = String(rows.length ? rows[rows.length - 1][0] : 0);
  }

  // Indices of the bins a graph with this step plots: those on a multiple of step bins in
  // absolute time (so old points stay put as the window slides) and always the newest one.
  function sampleIndices(step) {
    const times = store.times;
    const out = [];
    for (let i = 0; i < times.length; i++) {
      if (step === 1 || i === times.length - 1 || Math.round(times[i] / store.binMs) % step === 0) out.push(i);
    }
    return out;
  }

  function drawGraphs() {
    const times = store.times;
    const n = times.length;
    const scale = mbpsPerByte();
    const indices = new Map();  // step -> sampleIndices(step), computed once per frame
    const indicesFor = (step) => {
      if (!indices.has(step)) indices.set(step, sampleIndices(step));
      return indices.get(step);
    };

    for (const [key, route] of routeRows) {
      const prefix = prefixSums(store.series.get('route:' + key), n);
      // Capacity and ceiling: constant dashed series, only when known (non-zero).
      const extraLabels = [];
      const extraValues = [];
      if (route.capacityBps > 0) { extraLabels.push('capacity'); extraValues.push(route.capacityBps / 1e6); }
      if (route.ceilingBps > 0) { extraLabels.push('ceiling'); extraValues.push(route.ceilingBps / 1e6); }
      for (const view of route.views) {
        const idx = indicesFor(view.step);
        const rows = new Array(idx.length);
        for (let k = 0; k < idx.length; k++) {
          const i = idx[k];
          const row = [times[i], windowMean(prefix, i, view.bins) * scale];
          const edge = k === 0 || k === idx.length - 1;
          for (const v of extraValues) row.push(edge ? v : null);
          rows[k] = row;
        }
        plot(view, rows, ['time', view.title].concat(extraLabels), rows.length ? rows[rows.length - 1][1] : 0);
      }
    }

    // Node pairs: one series per pair at the 1-s average; data-last-mbps is their sum.
    const pairs = Array.from(store.series.keys()).filter((s) => s.startsWith('pair:')).sort();
    const prefixes = pairs.map((name) => prefixSums(store.series.get(name), n));
    const idx = pairs.length ? indicesFor(pairsView.step) : [];
    const rows = new Array(idx.length);
    for (let k = 0; k < idx.length; k++) {
      const row = [times[idx[k]]];
      for (const prefix of prefixes) row.push(windowMean(prefix, idx[k], pairsView.bins) * scale);
      rows[k] = row;
    }
    let lastSum = 0;
    if (rows.length) for (let j = 1; j < rows[rows.length - 1].length; j++) lastSum += rows[rows.length - 1][j];
    plot(pairsView, rows, ['time'].concat(pairs.map((s) => s.slice('pair:'.length))), lastSum);

    drawStreams();
  }

  // The watched pair's streams at 0.1, 1 and 10 s; data-last-mbps is their sum.
  function drawStreams() {
    const times = streamStore.times;
    const n = times.length;
    const scale = 8 / (streamStore.binMs * 1000);
    const names = Array.from(streamStore.series.keys()).sort();
    const prefixes = names.map((name) => prefixSums(streamStore.series.get(name), n));
    for (const view of streamViews) {
      const rows = [];
      if (names.length) {
        for (let i = 0; i < n; i++) {
          if (view.step !== 1 && i !== n - 1 && Math.round(times[i] / streamStore.binMs) % view.step !== 0) continue;
          const row = [times[i]];
          for (const prefix of prefixes) row.push(windowMean(prefix, i, view.bins) * scale);
          rows.push(row);
        }
      }
      let lastSum = 0;
      if (rows.length) for (let j = 1; j < rows[rows.length - 1].length; j++) lastSum += rows[rows.length - 1][j];
      plot(view, rows, ['time'].concat(names), lastSum);
    }
  }

  // requestAnimationFrame batching: any number of messages -> at most one redraw per FRAME_MS.
  let dirty = false;
  let frameRequested = false;
  let lastDrawAt = -Infinity;

  function requestDraw() {
    dirty = true;
    if (!frameRequested) {
      frameRequested = true;
      requestAnimationFrame(onFrame);
    }
  }

  function onFrame(now) {
    frameRequested = false;
    if (!dirty) return;
    if (now - lastDrawAt < FRAME_MS) {  // too soon: look again next frame
      frameRequested = true;
      requestAnimationFrame(onFrame);
      return;
    }
    lastDrawAt = now;
    dirty = false;
    try {
      drawGraphs();
    } catch (err) {
      console.error('gfdash: drawing failed', err);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Formatting

  function fmtNum(v) {
    if (v === 0) return '0';
    return Math.abs(v) < 10 ? v.toFixed(1) : String(Math.round(v));
  }

  // bits per second -> "812 Mbit/s", "1.0 Gbit/s"
  function formatRate(bps) {
    bps = Number(bps) || 0;
    for (const [f, unit] of [[1e9, 'Gbit/s'], [1e6, 'Mbit/s'], [1e3, 'kbit/s']]) {
      if (Math.abs(bps) >= f) return fmtNum(bps / f) + ' ' + unit;
    }
    return fmtNum(bps) + ' bit/s';
  }

  function formatBytes(bytes) {
    bytes = Number(bytes) || 0;
    for (const [f, unit] of [[1e15, 'PB'], [1e12, 'TB'], [1e9, 'GB'], [1e6, 'MB'], [1e3, 'kB']]) {
      if (Math.abs(bytes) >= f) return fmtNum(bytes / f) + ' ' + unit;
    }
    return fmtNum(bytes) + ' B';
  }

  function formatRtt(ms) {
    ms = Number(ms) || 0;
    if (ms <= 0) return '?';
    return ms < 10 ? ms.toFixed(1) : String(Math.floor(ms));
  }

  function formatTime(ms) {
    return new Date(ms).toLocaleTimeString([], { hour12: false });
  }

  function routeLabel(r) {
    return 'RTT ' + formatRtt(r.rtt_ms) + ' ms · cap ' +
      (r.capacity_bps > 0 ? formatRate(r.capacity_bps) : '?') + ' · now ' + formatRate(r.now_bps);
  }

  function files(n) {
    n = n || 0;
    return n === 1 ? '1 file' : `${n} files`;
  }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  // ---------------------------------------------------------------------------------------------
  // state: everything but the graphs. Each part is drawn on its own so that one malformed part
  // does not hide the others.

  function renderState(msg) {
    const parts = [
      () => updateRoutes(msg.routes || []),
      () => renderTopology(msg.sites || [], msg.routes || [], msg.replicas || {}),
      () => renderQueue(msg.queue || {}, msg.routes || []),
      () => renderReplicas(msg.replicas || {}),
      () => renderPolicies(msg.policies || []),
      () => renderErrors(msg.errors || []),
      () => renderTotals(msg.totals || {}, msg.time_ms),
    ];
    for (const part of parts) {
      try {
        part();
      } catch (err) {
        console.error('gfdash: bad state message', err);
      }
    }
  }

  function updateRoutes(routes) {
    for (const r of routes) {
      const route = ensureRouteRow(r.src + '->' + r.dst);
      const cap = Number(r.capacity_bps) || 0;
      const ceil = Number(r.ceiling_bps) || 0;
      if (cap !== route.capacityBps || ceil !== route.ceilingBps) {
        route.capacityBps = cap;
        route.ceilingBps = ceil;
        requestDraw();
      }
      setText(route.meta, routeLabel(r) + (ceil > 0 ? ' · ceiling ' + formatRate(ceil) : '') +
        ' · ' + files(r.files_in_flight) + ' in flight');
    }
  }

  // --- topology: sites on an ellipse, one arrow per route ---

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const topology = document.getElementById('topology');

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function renderTopology(sites, routes, replicas) {
    const W = 860, BOX_W = 200, LINE = 15;
    // Sites named only by a route still get a (node-less) box.
    const byName = new Map(sites.map((s) => [s.name, s]));
    for (const r of routes) {
      for (const name of [r.src, r.dst]) if (!byName.has(name)) byName.set(name, { name, nodes: [] });
    }
    const list = Array.from(byName.values());
    const boxH = (s) => LINE * (2 + (s.nodes || []).length) + 20;
    const maxH = list.reduce((m, s) => Math.max(m, boxH(s)), 0);
    const H = list.length <= 2 ? maxH + 70 : 2 * maxH + 150;
    topology.setAttribute('viewBox', `0 0 ${W} ${H}`);

    // Place site centres on an ellipse, the first one on the left.
    const rx = W / 2 - BOX_W / 2 - 10, ry = Math.max(0, H / 2 - maxH / 2 - 10);
    const centre = new Map();
    list.forEach((s, i) => {
      const a = Math.PI + (2 * Math.PI * i) / list.length;
      const x = list.length === 1 ? W / 2 : W / 2 + rx * Math.cos(a);
      const y = list.length === 1 ? H / 2 : H / 2 + ry * Math.sin(a);
      centre.set(s.name, { x, y, hw: BOX_W / 2, hh: boxH(s) / 2 });
    });

    const defs = svg('defs', {});
    const marker = svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' });
    marker.append(svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrow-head' }));
    defs.append(marker);
    const routeLayer = svg('g', { class: 'routes' });
    const siteLayer = svg('g', { class: 'sites' });

    // Where the line from c towards (dx, dy) leaves the box around c.
    const edge = (c, ox, oy, dx, dy) => {
      const t = Math.min(dx ? c.hw / Math.abs(dx) : Infinity, dy ? c.hh / Math.abs(dy) : Infinity);
      return { x: c.x + ox + dx * t, y: c.y + oy + dy * t };
    };

    const maxRate = routes.reduce((m, r) => Math.max(m, r.ceiling_bps || 0, r.capacity_bps || 0, r.now_bps || 0), 1);
    for (const r of routes) {
      const a = centre.get(r.src), b = centre.get(r.dst);
      if (!a || !b || a === b) continue;
      const len = Math.hypot(b.x - a.x, b.y - a.y) || 1;
      const ux = (b.x - a.x) / len, uy = (b.y - a.y) / len;
      const nx = -uy, ny = ux;  // normal: the two directions of a site pair sit on opposite sides
      const p = edge(a, nx * 7, ny * 7, ux, uy);
      const q = edge(b, nx * 7, ny * 7, -ux, -uy);
      const key = r.src + '->' + r.dst;
      const g = svg('g', { class: 'route' + ((r.now_bps || 0) > 0 ? ' active' : '') });
      g.setAttribute('data-route', key);
      g.append(svg('title', {}, `${key}: ${routeLabel(r)} · ceiling ` +
        `${r.ceiling_bps > 0 ? formatRate(r.ceiling_bps) : '?'} · ${files(r.files_in_flight)} in flight`));
      g.append(svg('line', { x1: p.x, y1: p.y, x2: q.x - ux * 3, y2: q.y - uy * 3,
        'stroke-width': (1.5 + 4 * Math.min(1, (r.now_bps || 0) / maxRate)).toFixed(2),
        'marker-end': 'url(#arrow)' }));
      // Label at the middle, on the route's own side, kept upright.
      let angle = (Math.atan2(uy, ux) * 180) / Math.PI;
      if (angle > 90) angle -= 180;
      if (angle < -90) angle += 180;
      const mx = (p.x + q.x) / 2 + nx * 12, my = (p.y + q.y) / 2 + ny * 12;
      g.append(svg('text', { x: mx, y: my, class: 'route-label', 'text-anchor': 'middle',
        'dominant-baseline': 'middle', transform: `rotate(${angle.toFixed(1)} ${mx} ${my})` }, routeLabel(r)));
      routeLayer.append(g);
    }

    for (const s of list) {
      const c = centre.get(s.name);
      const x0 = c.x - c.hw, y0 = c.y - c.hh;
      const g = svg('g', { class: 'site' });
      g.setAttribute('data-site', s.name);
      g.append(svg('rect', { x: x0, y: y0, width: 2 * c.hw, height: 2 * c.hh, rx: 6 }));
      const labels = Object.entries(s.labels || {}).map(([k, v]) => `${k}=${v}`).join(' ');
      const name = svg('text', { x: x0 + 10, y: y0 + LINE + 3, class: 'site-name' }, s.name);
      if (labels) name.append(svg('tspan', { class: 'site-labels', dx: 8 }, labels));
      g.append(name);
      const count = replicas[s.name];
      g.append(svg('text', { x: x0 + 10, y: y0 + 2 * LINE + 5, class: 'site-replicas' },
        count === undefined ? '' : `${count} replicas`));
      (s.nodes || []).forEach((node, i) => {
        const t = svg('text', { x: x0 + 16, y: y0 + (3 + i) * LINE + 6, class: 'node' + (node.live ? '' : ' dead') },
          `${node.name} · ${node.active_transfers || 0} xfers · ${formatBytes(node.free_bytes)} free` +
          (node.live ? '' : ' · down'));
        t.setAttribute('data-node', node.name);
        g.append(t);
      });
      siteLayer.append(g);
    }
    topology.replaceChildren(defs, routeLayer, siteLayer);
  }

  // --- queue ---

  const requestRows = new Map();  // id -> <tr>
  let selectedRequest = null;

  function makeRequestRow(id) {
    const tr = el('tr', 'request');
    tr.dataset.id = id;
    tr.title = 'click for details';
    tr.append(el('td', 'num', '#' + id), el('td', 'owner'), el('td'), el('td', 'num files'), el('td', 'bytes'));
    tr.cells[2].append(el('span', 'state'));
    const bar = el('div', 'bar');
    bar.append(el('span', 'done'), el('span', 'flying'));
    tr.cells[4].append(bar, el('div', 'bar-text dim'));
    return tr;
  }

  function fillRequestRow(tr, req) {
    const state = String(req.state || '');
    tr.dataset.state = state;
    tr.classList.toggle('selected', tr.dataset.id === selectedRequest);
    setText(tr.cells[1], String(req.owner || ''));
    const badge = tr.cells[2].firstChild;
    setText(badge, state);
    badge.className = 'state state-' + state;
    setText(tr.cells[3], `${req.files_done || 0}/${req.files_total || 0}` +
      (req.files_failed ? ` (${req.files_failed} failed)` : ''));
    const total = Number(req.bytes_total) || 0;
    const done = Number(req.bytes_done) || 0;
    const flying = Number(req.in_flight_bytes) || 0;
    const pct = (v) => (total > 0 ? Math.min(100, (100 * v) / total) : 0).toFixed(1) + '%';
    const [doneBar, flyingBar] = tr.cells[4].firstChild.children;
    doneBar.style.width = pct(done);
    flyingBar.style.width = pct(Math.min(flying, Math.max(0, total - done)));
    setText(tr.cells[4].lastChild, `${formatBytes(done)} / ${formatBytes(total)}` +
      (flying ? ` (+${formatBytes(flying)} in flight)` : ''));
  }

  function renderQueue(queue, routes) {
    const tasks = queue.tasks || {};
    setText(document.getElementById('tasks-queued'), String(tasks.queued || 0));
    setText(document.getElementById('tasks-leased'), String(tasks.leased || 0));

    // Update rows in place (keyed by id) so that a row under the mouse is not replaced.
    const tbody = document.getElementById('requests').tBodies[0];
    const seen = new Set();
    let prev = null;
    for (const req of queue.requests || []) {
      const id = String(req.id);
      seen.add(id);
      let tr = requestRows.get(id);
      if (!tr) {
        tr = makeRequestRow(id);
        requestRows.set(id, tr);
      }
      fillRequestRow(tr, req);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (tr !== want) tbody.insertBefore(tr, want);
      prev = tr;
    }
    for (const [id, tr] of requestRows) {
      if (!seen.has(id)) {
        tr.remove();
        requestRows.delete(id);
      }
    }
    document.getElementById('requests-empty').hidden = requestRows.size > 0;

    const flights = document.getElementById('route-flights').tBodies[0];
    flights.replaceChildren(...routes.map((r) => {
      const tr = el('tr', 'route-flight');
      tr.dataset.route = r.src + '->' + r.dst;
      tr.append(el('td', '', `${r.src} → ${r.dst}`), el('td', 'num', files(r.files_in_flight)),
        el('td', 'num', formatRate(r.now_bps)));
      return tr;
    }));
  }

  // --- replicas, policies, errors, totals ---

  function renderReplicas(replicas) {
    const entries = Object.entries(replicas).sort((a, b) => a[0].localeCompare(b[0]));
    const max = entries.reduce((m, [, v]) => Math.max(m, Number(v) || 0), 1);
    document.getElementById('replicas').tBodies[0].replaceChildren(...entries.map(([site, count]) => {
      const tr = el('tr');
      tr.dataset.site = site;
      const bar = el('div', 'bar');
      const fill = el('span', 'done');
      fill.style.width = ((100 * (Number(count) || 0)) / max).toFixed(1) + '%';
      bar.append(fill);
      const cell = el('td', 'bar-cell');
      cell.append(bar);
      tr.append(el('td', '', site), el('td', 'num', String(count)), cell);
      return tr;
    }));
  }

  function renderPolicies(policies) {
    document.getElementById('policies').tBodies[0].replaceChildren(...policies.map((p) => {
      const tr = el('tr', 'policy' + (p.failed ? ' has-failed' : ''));
      tr.dataset.rule = p.rule;
      tr.append(el('td', '', p.rule));
      for (const k of ['files', 'satisfied', 'in_flight', 'waiting', 'failed', 'ended']) {
        const td = el('td', 'num ' + k.replace('_', '-'), String(p[k] || 0));
        tr.append(td);
      }
      return tr;
    }));
  }

  let errorsKey = '';
  function renderErrors(errors) {
    const key = JSON.stringify(errors);
    if (key === errorsKey) return;  // unchanged: keep the text selectable
    errorsKey = key;
    const list = errors.slice().sort((a, b) => (b.time_ms || 0) - (a.time_ms || 0)).slice(0, MAX_ERRORS);
    const ul = document.getElementById('errors');
    if (!list.length) {
      ul.replaceChildren(el('li', 'dim', 'none'));
      return;
    }
    ul.replaceChildren(...list.map((e) => {
      const li = el('li', 'error-item');
      li.append(el('time', 'dim', formatTime(e.time_ms || 0)), document.createTextNode(' ' + (e.what || '')));
      return li;
    }));
  }

  function renderTotals(totals, timeMs) {
    const bytes = Math.round(Number(totals.bytes) || 0);
    const total = document.getElementById('total-bytes');
    setText(total, String(bytes));
    total.dataset.bytes = String(bytes);
    setText(document.getElementById('total-bytes-human'), `(${formatBytes(bytes)})`);
    setText(document.getElementById('total-rate'), formatRate(totals.bps));
    if (timeMs) setText(document.getElementById('as-of'), 'as of ' + formatTime(timeMs));
  }

  // ---------------------------------------------------------------------------------------------
  // Detail pane: a request's unfinished files, or why a path has (or lacks) its replicas.

  const detail = document.getElementById('detail');
  let detailSeq = 0;  // only the newest fetch may fill the pane

  function table(headers, rows) {
    const t = el('table', 'grid');
    const head = el('tr');
    for (const h of headers) head.append(el('th', '', h));
    t.append(el('thead'), el('tbody'));
    t.tHead.append(head);
    for (const cells of rows.slice(0, MAX_DETAIL_ROWS)) {
      const tr = el('tr');
      for (const c of cells) tr.append(el('td', '', c === undefined || c === null ? '' : String(c)));
      t.tBodies[0].append(tr);
    }
    return t;
  }

  function more(rows) {
    return rows.length > MAX_DETAIL_ROWS ? [el('p', 'dim', `… and ${rows.length - MAX_DETAIL_ROWS} more`)] : [];
  }

  async function loadDetail(url, title, render) {
    const seq = ++detailSeq;
    detail.dataset.kind = 'loading';
    detail.replaceChildren(el('p', 'dim', 'loading …'));
    let body;
    try {
      const resp = await fetch(url, { cache: 'no-store' });
      body = await resp.json().catch(() => ({}));
      if (!resp.ok && !body.error) body = { error: `HTTP ${resp.status} ${resp.statusText}` };
    } catch (err) {
      body = { error: String((err && err.message) || err) };
    }
    if (seq !== detailSeq) return;  // superseded by a newer click
    if (body.error) {
      detail.dataset.kind = 'error';
      detail.replaceChildren(el('h3', '', title), el('p', 'error', 'error: ' + body.error));
      return;
    }
    render(body);
  }

  function showRequest(id) {
    selectedRequest = id;
    for (const [rid, tr] of requestRows) tr.classList.toggle('selected', rid === id);
    loadDetail(new URL('api/request?id=' + encodeURIComponent(id), location.href), `request ${id}`, (r) => {
      // The files not done, as the catalog follows them (wanted, copying, failed and why); a
      // copying file shows what its copy is doing.
      const copies = new Map((r.files || []).map((c) => [c.path, c]));
      const list = r.file_states || [];
      const rows = list.map((f) => {
        const c = f.state === 'copying' ? copies.get(f.path) : undefined;
        return [f.path, c ? `copying (${c.state} → ${c.dst})` : f.state, c ? c.reason : f.reason];
      });
      detail.dataset.kind = 'request';
      detail.replaceChildren(
        el('h3', '', `request ${r.id ?? id} · ${r.state || '?'} · ${r.owner || '?'}`),
        list.length ? el('p', 'dim', `${files(list.length)} not done`) : el('p', 'dim', 'all files done'),
        ...(list.length ? [table(['path', 'state', 'reason'], rows)] : []),
        ...more(rows));
    });
  }

  function showExplain(path) {
    selectedRequest = null;
    for (const tr of requestRows.values()) tr.classList.remove('selected');
    loadDetail(new URL('api/explain?path=' + encodeURIComponent(path), location.href), `explain ${path}`, (x) => {
      const locations = (x.locations || []).map((l) => [l.node, l.state]);
      const rules = (x.rules || []).map((r) => [r.rule, r.state, `${r.have ?? '?'}/${r.wanted ?? '?'}`, r.reason]);
      detail.dataset.kind = 'explain';
      detail.replaceChildren(
        el('h3', '', `explain ${x.path || path}`),
        el('h4', '', 'replicas'),
        locations.length ? table(['node', 'state'], locations) : el('p', 'dim', 'no replicas'),
        ...more(locations),
        el('h4', '', 'rules'),
        rules.length ? table(['rule', 'state', 'have/wanted', 'reason'], rules) : el('p', 'dim', 'no rule covers this path'),
        ...more(rules));
    });
  }

  document.getElementById('requests').tBodies[0].addEventListener('click', (ev) => {
    const tr = ev.target.closest('tr.request');
    if (tr) showRequest(tr.dataset.id);
  });

  document.getElementById('explain-form').addEventListener('submit', (ev) => {
    ev.preventDefault();  // handles both the button (explain-go) and Enter in the box
    const path = document.getElementById('explain-path').value.trim();
    if (path) showExplain(path);
  });

  // ---------------------------------------------------------------------------------------------
  // Connection: reconnect every RECONNECT_MS forever; the history message refills the graphs.

  const statusEl = document.getElementById('status');
  let ws = null;
  let reconnectTimer = null;
  let lastActivity = 0;  // connect start, open or last message (Date.now())

  function setStatus(connected) {
    const s = connected ? 'connected' : 'disconnected';
    setText(statusEl, s);
    statusEl.className = s;
    document.body.classList.toggle('offline', !connected);
  }

  function wsUrl() {
    const u = new URL('ws', location.href);  // /ws when the page is served at /
    u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
    u.search = '';
    u.hash = '';
    return u.href;
  }

  function connect() {
    reconnectTimer = null;
    let sock;
    try {
      sock = new WebSocket(wsUrl());
    } catch (err) {
      console.error('gfdash: cannot open WebSocket', err);
      scheduleReconnect();
      return;
    }
    ws = sock;
    lastActivity = Date.now();
    sock.onopen = () => {
      lastActivity = Date.now();
      setStatus(true);
      if (streamStore.pair) sendWatch();  // a new connection watches nothing until told
    };
    sock.onmessage = (ev) => {
      lastActivity = Date.now();
      handleMessage(ev.data);
    };
    sock.onerror = sock.onclose = () => {
      if (ws === sock) dropConnection();
    };
  }

  function dropConnection() {
    streamStore.lastEndMs = null;  // the next connection starts with a reset
    const sock = ws;
    ws = null;
    if (sock) {
      sock.onopen = sock.onmessage = sock.onerror = sock.onclose = null;
      try { sock.close(); } catch (err) { /* already closed */ }
    }
    setStatus(false);
    scheduleReconnect();
  }

  function scheduleReconnect() {
    if (!reconnectTimer) reconnectTimer = setTimeout(connect, RECONNECT_MS);
  }

  // Watchdog: a server that stops without closing the socket (or a connect that hangs).
  setInterval(() => {
    if (ws && Date.now() - lastActivity > STALE_MS) {
      console.warn('gfdash: connection silent, reconnecting');
      dropConnection();
    }
  }, 1000);

  function handleMessage(data) {
    let msg;
    try {
      msg = JSON.parse(data);
    } catch (err) {
      console.warn('gfdash: ignoring a frame that is not JSON', err);
      return;
    }
    try {
      if (msg.type === 'tick') {
        gfdash.ticks++;
        gfdash.lastTickMs = Number(msg.end_ms) || 0;
        appendTick(msg);
        requestDraw();
      } else if (msg.type === 'history') {
        loadHistory(msg);
        requestDraw();
      } else if (msg.type === 'state') {
        renderState(msg);
      } else if (msg.type === 'streams') {
        onStreams(msg);
        requestDraw();
      }
    } catch (err) {
      console.error('gfdash: cannot handle a ' + msg.type + ' message', err);
    }
  }

  setStatus(false);
  connect();
})();
