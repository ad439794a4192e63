// The run page's timeline: a Gantt chart of the run built from its events alone. Each step
// execution is a row; its attempts, the delays before its retries, its sleeps and its
// suspensions are bars on one time axis. A foreach opens into a row per item and a loop into a
// row per iteration, which open into their steps; picking a row shows what it did and can
// narrow the event list to it.
'use strict';

(() => {
  const { TERMINAL, h, fill, jsonBlock, lasting, badge } = self.weft;
  const { kindOf } = self.weft;

  // Rows of a foreach or a loop shown at once; more are a click away, so a long foreach does
  // not make the page slow.
  const PAGE = 100;
  const WAITS = { 'retry-wait': 'retry delay', sleep: 'sleep', suspended: 'suspended' };
  const ENDS = { 'step-succeeded': 'success', 'step-failed': 'failed', 'step-cancelled': 'cancelled' };

  const keyOf = (path, item, iteration) => `${path}|${item ?? ''}|${iteration ?? ''}`;
  const under = (path, block) => path.startsWith(`${block}.`);

  /** From the first start to the last end of `segs` (spread arguments would overflow the stack
   *  on a long run). */
  function span(segs) {
    return segs.reduce((a, x) => ({ from: Math.min(a.from, x.from), to: Math.max(a.to, x.to) }), { from: Infinity, to: -Infinity });
  }

  /** The longest path of `paths` that `path` is inside of. */
  function owner(path, paths) {
    let best = null;
    for (const p of paths) if (under(path, p) && (!best || p.length > best.length)) best = p;
    return best;
  }

  /** Reads the events into executions: `{path, item, iteration, segs, status, first}`, each
   *  segment `{kind, from, to, status, attempt, note, open}` in milliseconds. Items of a
   *  foreach have no `step-started` of their own (S90): an item starts when the foreach does
   *  or, with every slot of its `concurrency` taken, when an earlier item ends. */
  function executions(events, graph, end) {
    const blocks = new Map();
    for (const e of (graph && graph.entries) || []) {
      const [kind, k] = kindOf(e);
      if (kind === 'foreach' || kind === 'loop') blocks.set(e.path, { kind, concurrency: Math.max(1, k.concurrency || 1) });
    }
    const foreachs = [...blocks].filter(([, b]) => b.kind === 'foreach').map(([p]) => p);
    const fe = new Map();
    const foreach = (path) => {
      if (!fe.has(path)) fe.set(path, { start: null, ends: [], items: new Map() });
      return fe.get(path);
    };
    const runs = new Map();
    let order = 0;
    const get = (path, item, iteration) => {
      const k = keyOf(path, item, iteration);
      if (!runs.has(k)) runs.set(k, { path, item, iteration, segs: [], open: null, status: 'running', first: order++, attempts: 0 });
      return runs.get(k);
    };
    const itemStart = (f, i, at) => {
      const info = foreach(f);
      const c = blocks.get(f).concurrency;
      const freed = i < c ? info.start : info.ends[i - c];
      return freed === undefined || freed === null || freed > at ? at : freed;
    };
    const close = (ex, at, status, note) => {
      if (!ex.open) return;
      ex.open.to = Math.max(at, ex.open.from);
      if (status) ex.open.status = status;
      if (note) ex.open.note = note;
      // An attempt a resume opened and a `step-started` at once replaced took no time: drop it.
      if (!(ex.open.implied && ex.open.to === ex.open.from)) ex.segs.push(ex.open);
      ex.open = null;
    };
    const open = (ex, seg) => {
      if (seg.kind === 'attempt') seg.attempt = seg.attempt || ++ex.attempts;
      ex.open = { status: 'running', ...seg };
    };
    const begin = (ex, at) => {
      if (ex.open || ex.segs.length) return;
      const f = ex.item !== undefined ? owner(ex.path, foreachs) : null;
      open(ex, { kind: 'attempt', from: f ? itemStart(f, ex.item, at) : at });
    };
    for (const ev of events) {
      const at = Date.parse(ev.at);
      if (Number.isNaN(at)) continue;
      const type = ev.type;
      const data = ev.data && typeof ev.data === 'object' ? ev.data : {};
      if (type === 'run-resumed') {
        const indexes = Array.isArray(data.foreach_indexes) ? data.foreach_indexes : [];
        for (const ex of runs.values()) {
          if (!ex.open || ex.open.kind !== 'suspended' || typeof data.path !== 'string') continue;
          const hit = ex.path === data.path || under(ex.path, data.path) || under(data.path, ex.path);
          if (!hit || (indexes.length && ex.item !== undefined && !indexes.includes(ex.item))) continue;
          close(ex, at, 'resumed');
          ex.status = 'running';
          open(ex, { kind: 'attempt', from: at, note: 'resumed', implied: true });
        }
        continue;
      }
      if (!ev.path || type.startsWith('run-')) continue;
      if (type === 'step-progress' && blocks.has(ev.path)) {
        const info = foreach(ev.path);
        const i = Number(data.index);
        if (data.status !== 'suspended') info.ends.push(at);
        info.items.set(i, { at, status: data.status, error: data.error });
        continue;
      }
      const ex = get(ev.path, ev.foreach_index, ev.iteration);
      if (type === 'step-started') {
        if (blocks.has(ev.path) && blocks.get(ev.path).kind === 'foreach' && foreach(ev.path).start === null) foreach(ev.path).start = at;
        close(ex, at, ex.open && ex.open.kind === 'suspended' ? 'resumed' : null);
        ex.status = 'running';
        open(ex, { kind: 'attempt', from: at, note: data.resume ? 'resumed' : null });
      } else if (type === 'step-retrying') {
        begin(ex, at);
        const delay = Number(data.delay_ms) || 0;
        const why = data.error && data.error.message ? data.error.message : 'failed';
        close(ex, at, 'failed', `${why}; tried again`);
        if (delay > 0) ex.segs.push({ kind: 'retry-wait', from: at, to: at + delay, status: 'waiting', note: `${delay} ms before attempt ${Number(data.attempt) + 1}` });
        open(ex, { kind: 'attempt', from: at + delay, attempt: Number(data.attempt) + 1 });
        ex.attempts = Math.max(ex.attempts, Number(data.attempt) + 1);
      } else if (type === 'step-waiting') {
        begin(ex, at);
        close(ex, at, 'success');
        ex.status = 'waiting';
        const until = Date.parse(data.until);
        open(ex, { kind: 'sleep', from: at, note: Number.isNaN(until) ? null : `until ${data.until}` });
      } else if (type === 'step-suspended') {
        begin(ex, at);
        close(ex, at, 'suspended');
        ex.status = 'suspended';
        const labels = Array.isArray(data.labels) && data.labels.length ? data.labels.join(', ') : 'a resume';
        open(ex, { kind: 'suspended', from: at, note: `waiting for ${labels}` });
      } else if (ENDS[type]) {
        begin(ex, at);
        const why = type === 'step-failed' && data.error && data.error.message ? data.error.message : null;
        close(ex, at, ENDS[type], why);
        ex.status = ENDS[type];
      }
    }
    // Items whose ends are known close there; what is still open runs to `end`.
    for (const ex of runs.values()) {
      const f = ex.item !== undefined ? owner(ex.path, foreachs) : null;
      const done = f && fe.has(f) ? fe.get(f).items.get(ex.item) : null;
      if (done && done.status !== 'suspended' && ex.open && ex.open.kind !== 'suspended') {
        close(ex, done.at, done.status);
        ex.status = done.status;
      }
      if (ex.open) {
        ex.open.open = true;
        ex.open.to = Math.max(end, ex.open.from);
        ex.segs.push(ex.open);
        ex.open = null;
      }
    }
    return { runs: [...runs.values()].sort((a, b) => a.first - b.first), blocks, fe, foreachs, itemStart };
  }

  /** The rows to draw: `{key, label, path, item, iteration, scope, segs, status, children}`. */
  function rows(events, graph, end) {
    const m = executions(events, graph, end);
    const loops = [...m.blocks].filter(([, b]) => b.kind === 'loop').map(([p]) => p);
    // What each execution belongs to: the innermost foreach item or loop iteration around it.
    const home = (ex) => {
      const f = ex.item !== undefined ? owner(ex.path, m.foreachs) : null;
      const l = ex.iteration !== undefined ? owner(ex.path, loops) : null;
      if (f && (!l || f.length >= l.length)) return `item:${f}:${ex.item}`;
      if (l) return `iteration:${l}:${ex.iteration}`;
      return 'top';
    };
    const byHome = new Map();
    for (const ex of m.runs) {
      const k = home(ex);
      if (!byHome.has(k)) byHome.set(k, []);
      byHome.get(k).push(ex);
    }
    function build(list) {
      return list.map((ex) => {
        const row = {
          key: keyOf(ex.path, ex.item, ex.iteration), label: ex.path, path: ex.path, item: ex.item, iteration: ex.iteration,
          segs: ex.segs, status: ex.status, attempts: ex.attempts, children: null,
        };
        const block = m.blocks.get(ex.path);
        if (block && block.kind === 'foreach') row.children = items(ex);
        if (block && block.kind === 'loop') row.children = iterations(ex);
        return row;
      });
    }
    function items(ex) {
      const info = m.fe.get(ex.path) || { items: new Map() };
      const indexes = new Set(info.items.keys());
      for (const k of byHome.keys()) {
        const [what, path, i] = k.split(':');
        if (what === 'item' && path === ex.path) indexes.add(Number(i));
      }
      return [...indexes].sort((a, b) => a - b).map((i) => {
        const inner = byHome.get(`item:${ex.path}:${i}`) || [];
        const done = info.items.get(i);
        const paths = new Set(inner.map((x) => x.path));
        let segs;
        if (paths.size === 1) segs = inner[0].segs;
        else {
          const from = inner.length ? span(inner.flatMap((x) => x.segs)).from : m.itemStart(ex.path, i, done ? done.at : end);
          const to = done && done.status !== 'suspended' ? done.at : end;
          segs = [{ kind: 'attempt', from, to, status: done ? done.status : 'running', attempt: 1, open: !done }];
        }
        const status = done ? done.status : (inner.length ? inner[inner.length - 1].status : 'running');
        return {
          key: `item|${ex.path}|${i}`, label: `item ${i}`, path: ex.path, item: i, segs, status,
          attempts: paths.size === 1 ? inner[0].attempts : null,
          children: paths.size > 1 ? build(inner) : null,
          scope: { kind: 'item', block: ex.path, index: i, error: done && done.error },
        };
      });
    }
    function iterations(ex) {
      const found = new Set();
      for (const k of byHome.keys()) {
        const [what, path, i] = k.split(':');
        if (what === 'iteration' && path === ex.path) found.add(Number(i));
      }
      return [...found].sort((a, b) => a - b).map((n) => {
        const inner = byHome.get(`iteration:${ex.path}:${n}`);
        const s = span(inner.flatMap((x) => x.segs));
        const last = inner[inner.length - 1];
        return {
          key: `iteration|${ex.path}|${n}`, label: `iteration ${n}`, path: ex.path, iteration: n,
          segs: [{ kind: 'span', from: s.from, to: s.to, status: last.status }], status: last.status,
          children: build(inner), scope: { kind: 'iteration', block: ex.path, index: n },
        };
      });
    }
    return build(byHome.get('top') || []);
  }

  /** The segment's words: what it was and how long it took. */
  function describe(seg) {
    const took = lasting(seg.to - seg.from);
    const what = seg.kind === 'attempt' ? `attempt ${seg.attempt}` : (WAITS[seg.kind] || 'ran');
    const state = seg.open ? 'still going' : seg.status;
    return `${what}: ${took}${state ? `, ${state}` : ''}${seg.note ? ` (${seg.note})` : ''}`;
  }

  /** The timeline panel; `update(events, record, graph)` redraws it, keeping what is open. */
  function timelineView(onScope) {
    const expanded = new Set();
    const shown = new Map();
    let picked = null;
    let last = null;
    const chart = h('div', { class: 'gantt', id: 'timeline', role: 'table', 'aria-label': 'Timeline of the steps' });
    const detail = h('div', { class: 'gantt-detail', id: 'timeline-detail', hidden: true, 'aria-live': 'polite' });
    const legend = h('p', { class: 'gantt-legend hint' }, 'Bars: ',
      ['attempt', 'failed', 'retry-wait', 'sleep', 'suspended'].map((k) => h('span', { class: `key key-${k}` },
        h('span', { class: 'swatch', 'aria-hidden': 'true' }), k === 'failed' ? 'failed attempt' : (WAITS[k] || k))));
    const el = h('div', { class: 'gantt-box' }, legend, chart, detail);

    function segEl(seg, t0, total) {
      const left = ((seg.from - t0) / total) * 100;
      const width = ((seg.to - seg.from) / total) * 100;
      const kind = seg.kind === 'attempt' && seg.status === 'failed' ? 'failed' : seg.kind;
      const text = describe(seg);
      const bar = h('span', {
        class: `seg seg-${kind}${seg.open ? ' open' : ''}`, title: text, 'data-kind': seg.kind,
        'data-status': seg.status, 'data-ms': String(Math.round(seg.to - seg.from)),
      }, h('span', { class: 'visually-hidden' }, text));
      bar.style.left = `${Math.min(Math.max(left, 0), 100)}%`;
      bar.style.width = `${Math.min(Math.max(width, 0), 100 - Math.min(Math.max(left, 0), 100))}%`;
      return bar;
    }

    function rowEls(list, depth, t0, total, out) {
      for (const row of list) {
        const kids = row.children || [];
        const open = expanded.has(row.key);
        const whole = span(row.segs);
        const took = row.segs.length ? lasting(whole.to - whole.from) : '';
        const label = h('button', {
          type: 'button', class: 'link-button gantt-name', 'data-key': row.key,
          'aria-expanded': kids.length ? String(open) : null,
          title: kids.length ? `${open ? 'Close' : 'Open'} ${row.label}` : `Show ${row.label}`,
        }, kids.length ? h('span', { class: 'twisty', 'aria-hidden': 'true' }, open ? '▾ ' : '▸ ') : null, row.label);
        label.addEventListener('click', () => {
          if (kids.length) { if (expanded.has(row.key)) expanded.delete(row.key); else expanded.add(row.key); }
          picked = row.key;
          draw();
        });
        const count = kids.length && !open
          ? h('span', { class: 'hint' }, ` ${kids.length} ${row.children[0].scope ? row.children[0].scope.kind : 'step'}${kids.length > 1 ? 's' : ''}`)
          : null;
        const rowEl = h('div', {
          class: `gantt-row${picked === row.key ? ' picked' : ''}`, role: 'row', 'data-path': row.path, 'data-status': row.status,
          'data-item': row.item !== undefined && row.scope ? String(row.item) : null,
          'data-iteration': row.iteration !== undefined && row.scope ? String(row.iteration) : null,
          'data-key': row.key,
        },
        h('div', { class: 'gantt-label', role: 'rowheader' }, label, count),
        h('div', { class: 'gantt-track', role: 'cell' }, row.segs.map((s) => segEl(s, t0, total))),
        h('div', { class: 'gantt-took', role: 'cell' }, took, row.attempts > 1 ? h('span', { class: 'hint' }, ` · ${row.attempts} attempts`) : null));
        rowEl.style.setProperty('--depth', String(depth));
        out.push(rowEl);
        if (open && kids.length) {
          const limit = shown.get(row.key) || PAGE;
          rowEls(kids.slice(0, limit), depth + 1, t0, total, out);
          if (kids.length > limit) {
            const more = h('button', { type: 'button', class: 'secondary small' }, `Show ${Math.min(PAGE, kids.length - limit)} more of ${kids.length}`);
            more.addEventListener('click', () => { shown.set(row.key, limit + PAGE); draw(); });
            const moreRow = h('div', { class: 'gantt-row more' }, h('div', { class: 'gantt-label' }, more));
            moreRow.style.setProperty('--depth', String(depth + 1));
            out.push(moreRow);
          }
        }
      }
    }

    function find(list, key) {
      for (const row of list) {
        if (row.key === key) return row;
        const inner = row.children ? find(row.children, key) : null;
        if (inner) return inner;
      }
      return null;
    }

    function showDetail(row, record) {
      if (!row) { detail.hidden = true; return; }
      const step = record && record.steps ? record.steps[row.path] : null;
      const parts = [h('h3', null, h('code', null, row.path), row.scope ? `, ${row.label}` : '', ' ', badge(row.status))];
      parts.push(h('ol', { class: 'gantt-segs' }, row.segs.map((s) => h('li', null, describe(s)))));
      if (row.scope && row.scope.kind === 'item') {
        // An item's input and output are on the record of the step inside the foreach.
        const inner = Object.entries((record && record.steps) || {})
          .filter(([p, s]) => under(p, row.path) && Array.isArray(s.items));
        for (const [p, s] of inner) {
          const it = s.items.find((x) => x.index === row.item);
          if (it) parts.push(h('h4', null, `${p}, item ${row.item}`), jsonBlock(it, `${p} item ${row.item}`));
        }
        if (row.scope.error) parts.push(h('h4', null, 'Error'), jsonBlock(row.scope.error, 'Item error'));
      } else if (!row.scope && step) {
        const { input, output, error } = step;
        if (input !== undefined) parts.push(h('h4', null, 'Input'), jsonBlock(input, `${row.path} input`));
        if (output !== undefined) parts.push(h('h4', null, 'Output'), jsonBlock(output, `${row.path} output`));
        if (error !== undefined) parts.push(h('h4', null, 'Error'), jsonBlock(error, `${row.path} error`));
      }
      const scope = row.scope || { kind: 'step', block: row.path };
      const only = h('button', { type: 'button', class: 'secondary small', id: 'timeline-only' },
        `Show only the events of ${row.scope ? `${row.label} of ${row.path}` : row.path}`);
      only.addEventListener('click', () => onScope({ ...scope, label: row.scope ? `${row.label} of ${row.path}` : row.path }));
      parts.push(h('div', { class: 'buttons' }, only));
      fill(detail, parts);
      detail.hidden = false;
    }

    let input = null;
    function draw() {
      const [events, record, graph] = input;
      const ended = record && TERMINAL.has(record.status);
      const times = events.map((e) => Date.parse(e.at)).filter((t) => !Number.isNaN(t));
      if (!times.length) { fill(chart, h('p', { class: 'empty' }, 'No step has started yet.')); return; }
      const t0 = times.reduce((a, b) => Math.min(a, b));
      const lastAt = times.reduce((a, b) => Math.max(a, b));
      // Open bars run to now; an ended run's to its end.
      const end = ended ? lastAt : Math.max(Date.now(), lastAt);
      const list = rows(events, graph, end);
      const segs = [];
      const collect = (rs) => rs.forEach((r) => { segs.push(...r.segs); if (r.children) collect(r.children); });
      collect(list);
      let t1;
      if (record && record.status === 'suspended') {
        // A run that waits for a person may wait for days: its axis ends a little after the
        // work, so the work is not squeezed into slivers; the wait's bar runs off the edge and
        // its words say how long it has lasted.
        const work = segs.reduce((a, x) => Math.max(a, x.open && x.kind === 'suspended' ? x.from : x.to), lastAt);
        t1 = work + Math.max((work - t0) * 0.15, 1);
      } else {
        t1 = segs.reduce((a, x) => Math.max(a, x.to), end);
      }
      const total = Math.max(t1 - t0, 1);
      const focused = chart.contains(document.activeElement) ? document.activeElement.dataset.key : null;
      const out = [];
      rowEls(list, 0, t0, total, out);
      const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => {
        const t = h('span', { class: 'tick' }, lasting(total * f));
        t.style.left = `${f * 100}%`;
        return t;
      });
      fill(chart,
        h('div', { class: 'gantt-row gantt-axis', role: 'row' }, h('div', { class: 'gantt-label', role: 'columnheader' }, 'Step'),
          h('div', { class: 'gantt-track', role: 'columnheader', 'aria-label': `From the run's start, ${lasting(total)} in all` }, ticks),
          h('div', { class: 'gantt-took', role: 'columnheader' }, 'Took')),
        out);
      if (focused) {
        const again = chart.querySelector(`button[data-key="${CSS.escape(focused)}"]`);
        if (again) again.focus();
      }
      showDetail(picked ? find(list, picked) : null, record);
    }

    return {
      el,
      update(events, record, graph) {
        const k = `${events.length}|${record && record.status}|${Boolean(graph)}`;
        input = [events, record, graph];
        // The open bars of a run that has not ended grow with the clock: drawn again each time.
        if (k === last && record && TERMINAL.has(record.status)) return;
        last = k;
        draw();
      },
    };
  }

  Object.assign(self.weft, { timelineView });
})();
