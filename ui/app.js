/*
 * ui/app.js - the /ui page's code: polls /ui/state once a second and shows
 * it (README.md, "The UI", has the state's schema).
 *
 * Lock names and client labels are user input: everything shown is put
 * in with textContent (or as an SVG attribute of numbers), never parsed as
 * markup. The page keeps no state between polls but the last answer's
 * time, so a broker restart or a lost poll heals itself.
 */
'use strict';

(function () {
  const POLL_MS = 1000;
  const SVG = 'http://www.w3.org/2000/svg';
  const H = 160, PAD_L = 44, PAD_B = 16, PAD_T = 8;

  let lastOk = 0;

  function byId(id) { return document.getElementById(id); }

  /* An element with a class and a text (both optional). */
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const k of Object.keys(attrs || {})) e.setAttribute(k, String(attrs[k]));
    return e;
  }

  function fmtMs(ms) {
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + ' s';
    if (ms < 3600000) return Math.floor(ms / 60000) + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
    return (ms / 3600000).toFixed(1) + ' h';
  }

  function fmtNum(v) {
    if (v >= 100) return String(Math.round(v));
    if (v >= 10) return v.toFixed(1);
    if (v === 0) return '0';
    return v.toFixed(2);
  }

  /* An axis value: no trailing zeros. */
  function fmtAxis(v) {
    return String(Number(v.toPrecision(3)));
  }

  function fmtUptime(s) {
    const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    return (d ? d + 'd ' : '') + (d || h ? h + 'h ' : '') + m + 'm ' + (s % 60) + 's';
  }

  function labelSpan(client) {
    return client === null || client === undefined || client === ''
      ? el('span', 'label none', 'no label') : el('span', 'label', client);
  }

  /* ---- header, store, totals ------------------------------------------- */

  function renderHeader(st) {
    const b = st.broker;
    byId('broker-meta').textContent =
      'broker ' + b.id + ' · v' + b.version + ' · up ' + fmtUptime(b.uptime_s) +
      (b.state !== 'running' ? ' · ' + b.state : '');
    const r = byId('redis-status');
    r.dataset.up = st.redis.up ? 'true' : 'false';
    r.textContent = st.redis.up ? 'Redis up' : 'Redis down';
    byId('store-mode').textContent = st.redis.mode;
    byId('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
  }

  function renderStore(st) {
    const t = st.redis.target || {};
    let what;
    switch (st.redis.mode) {
      case 'sentinel':
        what = 'Sentinel: master "' + t.master_name + '" via ' + (t.sentinels || []).join(', ');
        break;
      case 'cluster':
        what = 'Redis Cluster, seeds ' + (t.seeds || []).join(', ');
        break;
      case 'redlock':
        what = 'Redlock over ' + (t.redlock || []).length + ' independent masters';
        break;
      default:
        what = 'Single Redis at ' + t.addr + (t.db ? ' (db ' + t.db + ')' : '');
    }
    byId('store-target').textContent = what;
    const list = byId('masters');
    const items = [];
    for (const m of st.redis.masters) {
      const li = el('li', 'pill', m.addr + (m.slots ? ' · ' + m.slots + ' slots' : '') +
        ' · ' + (m.up ? 'up' : 'down'));
      li.dataset.up = m.up ? 'true' : 'false';
      items.push(li);
    }
    list.replaceChildren(...items);
  }

  function tile(k, v) {
    const d = el('div', 'tile');
    d.append(el('span', 'v', v), el('span', 'k', k));
    return d;
  }

  function renderTotals(st) {
    const t = st.totals, g = st.series.grants;
    byId('totals').replaceChildren(
      tile('sessions', t.sessions),
      tile('leases held', t.leases),
      tile('acquires waiting', t.waiters),
      tile('locks', t.locks),
      tile('grants/s', g.length ? g[g.length - 1] : 0),
      tile('grants', t.grants_total));
  }

  /* ---- charts ------------------------------------------------------------- */

  /* Draws lines (arrays of numbers or null for no value, oldest first,
   * the last one now) over `slots` seconds into the svg, drawn in the
   * svg's own pixels (text is not stretched). */
  function chart(node, lines, slots) {
    const W = Math.max(node.clientWidth || 600, 200);
    let max = 0;
    node.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    for (const l of lines) for (const v of l) if (v !== null && v > max) max = v;
    max = max > 0 ? niceCeil(max) : 1;
    const x = (i, n) => PAD_L + (W - PAD_L - 4) * (slots - n + i) / Math.max(slots - 1, 1);
    const y = (v) => PAD_T + (H - PAD_T - PAD_B) * (1 - v / max);
    const parts = [];
    for (const f of [0, 0.5, 1]) {
      parts.push(svg('line', {class: 'grid', x1: PAD_L, x2: W - 4, y1: y(max * f), y2: y(max * f)}));
      const t = svg('text', {class: 'axis', x: PAD_L - 4, y: y(max * f) + 4, 'text-anchor': 'end'});
      t.textContent = fmtAxis(max * f);
      parts.push(t);
    }
    const t0 = svg('text', {class: 'axis', x: PAD_L, y: H - 2});
    t0.textContent = '-' + Math.round(slots / 60) + ' min';
    const t1 = svg('text', {class: 'axis', x: W - 4, y: H - 2, 'text-anchor': 'end'});
    t1.textContent = 'now';
    parts.push(t0, t1);
    lines.forEach((l, k) => {
      /* A run of values is one polyline; a null breaks it. */
      let pts = [];
      const flush = () => {
        if (pts.length === 1) pts.push(pts[0]);
        if (pts.length) parts.push(svg('polyline', {class: 'series s' + k, points: pts.join(' ')}));
        pts = [];
      };
      l.forEach((v, i) => {
        if (v === null) { flush(); return; }
        pts.push(x(i, l.length).toFixed(1) + ',' + y(v).toFixed(1));
      });
      flush();
    });
    node.replaceChildren(...parts);
  }

  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function renderCharts(st) {
    const s = st.series;
    chart(byId('chart-grants'), [s.grants], s.seconds);
    const p50 = s.handoff_p50_ms.map((v, i) => (s.handoffs[i] ? v : null));
    const p99 = s.handoff_p99_ms.map((v, i) => (s.handoffs[i] ? v : null));
    chart(byId('chart-handoff'), [p50, p99], s.seconds);
  }

  /* ---- tables ------------------------------------------------------------- */

  function nameCell(lock) {
    const td = el('td', 'lock-name', lock.name);
    if (lock.name_cut) td.append(el('span', 'more', '…'));
    return td;
  }

  function holderLine(h) {
    const d = el('span', 'holder');
    d.append(labelSpan(h.client), el('span', 'session', h.session),
      el('span', 'mode-tag holder-mode', h.mode),
      el('span', 'fence', 'fence ' + h.fence),
      el('span', 'ttl', 'TTL ' + fmtMs(h.ttl_ms)));
    if (h.count > 1) d.append(el('span', 'count', '×' + h.count));
    return d;
  }

  function waiterLine(w) {
    const d = el('span', 'waiter');
    d.append(labelSpan(w.client), el('span', 'session', w.session),
      el('span', 'mode-tag', w.mode), el('span', 'waited', 'for ' + fmtMs(w.waited_ms)));
    return d;
  }

  function renderLocks(st) {
    const rows = [];
    for (const lock of st.locks) {
      const tr = el('tr', 'lock-row');
      const holders = el('td', 'lock-holders');
      for (const h of lock.holders) holders.append(holderLine(h));
      if (lock.holder_count > lock.holders.length)
        holders.append(el('span', 'more', '+' + (lock.holder_count - lock.holders.length) + ' more'));
      if (lock.holder_count === 0) holders.append(el('span', 'more', 'free here'));
      const waiting = el('td', 'lock-waiters');
      for (const w of lock.waiters) waiting.append(waiterLine(w));
      if (lock.queue_length > lock.waiters.length)
        waiting.append(el('span', 'more', '+' + (lock.queue_length - lock.waiters.length) + ' more'));
      tr.append(nameCell(lock), holders, el('td', 'num lock-queue', lock.queue_length), waiting,
        el('td', 'num lock-rate', fmtNum(lock.grants_per_s)));
      rows.push(tr);
    }
    byId('locks').tBodies[0].replaceChildren(...rows);
    byId('locks-empty').hidden = rows.length > 0;
    byId('locks-note').textContent = st.locks_total > st.locks.length
      ? '(the busiest ' + st.locks.length + ' of ' + st.locks_total + ')'
      : '(' + st.locks_total + ')';
  }

  function renderHot(st) {
    const rows = st.hot.map((h) => {
      const tr = el('tr', 'hot-row');
      tr.append(nameCell(h), el('td', 'num', fmtNum(h.grants_per_s)), el('td', 'num', h.grants));
      return tr;
    });
    byId('hot').tBodies[0].replaceChildren(...rows);
    byId('hot-empty').hidden = rows.length > 0;
  }

  /* ---- polling ------------------------------------------------------------- */

  function setError(msg) {
    const e = byId('error');
    e.hidden = !msg;
    e.textContent = msg || '';
    document.body.classList.toggle('stale', !!msg);
    if (msg) {
      const r = byId('redis-status');
      r.dataset.up = 'unknown';
      r.textContent = 'Redis ?';
    }
  }

  function render(st) {
    renderHeader(st);
    renderStore(st);
    renderTotals(st);
    renderCharts(st);
    renderLocks(st);
    renderHot(st);
  }

  async function poll() {
    try {
      const r = await fetch('/ui/state', {cache: 'no-store'});
      if (!r.ok) throw new Error('HTTP ' + r.status);
      const st = await r.json();
      render(st);
      lastOk = Date.now();
      setError(null);
      document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
    } catch (e) {
      setError('Cannot read /ui/state (' + e.message + ')' +
        (lastOk ? '; showing what it said at ' + new Date(lastOk).toLocaleTimeString() : ''));
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  poll();
})();
