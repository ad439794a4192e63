// The run page's drawing of its workflow (nested boxes with each step's status) and its table
// of steps, whose rows open to show what each step took and gave.
'use strict';

(() => {
  const { h, fill, short, jsonBlock, timeEl, duration, badge, notify } = self.weft;

  /** The graph's entry kinds, read. */
  function kindOf(entry) {
    const name = entry && entry.kind && typeof entry.kind === 'object' ? Object.keys(entry.kind)[0] : 'unknown';
    return [name, (entry && entry.kind && entry.kind[name]) || {}];
  }

  /** The run's workflow drawn as nested boxes; `update(record)` overlays step statuses. */
  function graphView(graph, onPick) {
    const nodes = new Map();
    const entries = Array.isArray(graph.entries) ? graph.entries : [];
    const files = Array.isArray(graph.files) ? graph.files : [];
    const seen = new Set();

    function sequence(ids, label) {
      return h('ol', { class: 'g-seq', 'aria-label': label || null },
        (ids || []).map((i) => h('li', null, node(entries[i]))));
    }
    function node(e) {
      if (!e || seen.has(e.path)) return h('span', { class: 'muted' }, '?');
      seen.add(e.path);
      const [kind, k] = kindOf(e);
      const status = h('span', { class: 'g-status' });
      const note = h('span', { class: 'g-note' });
      const name = h('button', { type: 'button', class: 'g-id link-button', title: `Show step ${e.path}` }, e.id);
      name.addEventListener('click', () => onPick(e.path));
      let what = kind;
      const extra = [];
      switch (kind) {
        case 'step': {
          const alias = String(k.plugin || '').replace(/^\d+\//, '');
          what = `${alias}: ${k.kind === 'tool' ? 'tool ' : ''}${k.step}`;
          if (k.input) extra.push(h('code', { class: 'g-expr' }, `input: ${short(String(k.input), 80)}`));
          break;
        }
        case 'map': extra.push(h('code', { class: 'g-expr' }, short(String(k.expr ?? ''), 80))); break;
        case 'sleep': what = k.ms !== undefined && k.ms !== null ? `sleep ${k.ms} ms` : 'sleep until'; if (k.until) extra.push(h('code', { class: 'g-expr' }, short(String(k.until), 80))); break;
        case 'parallel':
          extra.push(h('div', { class: 'g-arms' }, (k.arms || []).map((i) => h('div', { class: 'g-arm' }, node(entries[i])))));
          break;
        case 'branch':
          extra.push(h('div', { class: 'g-arms' }, (k.arms || []).map((a) => h('div', { class: 'g-arm' },
            h('div', { class: 'g-when' }, 'when ', h('code', null, short(String(a.when ?? ''), 80))), node(entries[a.entry])))));
          break;
        case 'foreach':
          what = `foreach (up to ${k.concurrency} at once)`;
          extra.push(sequence(k.body, `${e.id}: each item`));
          break;
        case 'loop':
          what = `${k.until ? 'do until' : 'do while'}${k.max_iterations ? `, at most ${k.max_iterations} times` : ''}`;
          extra.push(h('div', { class: 'g-when' }, k.until ? 'until ' : 'while ', h('code', null, short(String(k.test ?? ''), 80))));
          extra.push(sequence(k.body, `${e.id}: body`));
          break;
        case 'workflow': {
          const f = files[k.file];
          what = `workflow ${f ? f.id : ''}`;
          if (f) extra.push(sequence(f.body, `${e.id}: steps`));
          break;
        }
        case 'group': what = 'steps'; extra.push(sequence(k.body, `${e.id}: steps`)); break;
        case 'agent': {
          // Its model and tool calls are records under its path (the step table lists them).
          const tools = (k.tools || []).map((t) => t.name + (t.approve ? ' (approval)' : ''));
          what = `agent: ${k.model}${tools.length ? `; tools ${tools.join(', ')}` : ''}`;
          break;
        }
        default: break;
      }
      const box = h('div', { class: `g-node g-${kind}`, 'data-path': e.path, 'data-status': 'not started' },
        h('div', { class: 'g-head' }, name, h('span', { class: 'g-kind' }, what), status), note, extra);
      nodes.set(e.path, { box, status, note });
      return box;
    }

    const root = files[0];
    const el = h('div', { class: 'graph' },
      h('div', { class: 'g-end' }, 'start'),
      root ? sequence(root.body, 'Workflow steps') : h('p', { class: 'muted' }, 'No graph.'),
      h('div', { class: 'g-end' }, 'end'));
    return {
      el,
      update(record) {
        const steps = (record && record.steps) || {};
        // Per suspended path: its labels, and the foreach items that wait.
        const waiting = new Map();
        for (const s of (record && record.suspended) || []) {
          const w = waiting.get(s.path) || { labels: new Set(), items: [] };
          for (const l of s.labels || []) w.labels.add(l);
          if (s.foreach_index !== null && s.foreach_index !== undefined) w.items.push(s.foreach_index);
          waiting.set(s.path, w);
        }
        for (const [path, n] of nodes) {
          const rec = steps[path];
          const st = rec ? rec.status : 'not started';
          if (n.box.dataset.status !== st || !n.status.firstChild) {
            n.box.dataset.status = st;
            fill(n.status, badge(st));
          }
          const notes = [];
          const w = waiting.get(path);
          if (w) {
            const who = w.labels.size ? [...w.labels].join(', ') : 'a resume';
            const items = w.items.length ? ` (item${w.items.length > 1 ? 's' : ''} ${w.items.join(', ')})` : '';
            notes.push(`waiting for ${who}${items}`);
          }
          if (rec && Array.isArray(rec.items) && rec.items.length) {
            const counts = new Map();
            for (const i of rec.items) counts.set(i.status, (counts.get(i.status) || 0) + 1);
            notes.push(`items: ${[...counts].map(([st, n]) => `${n} ${st}`).join(', ')}`);
          }
          if (rec && rec.attempts > 1) notes.push(`${rec.attempts} attempts`);
          const text = notes.join(' · ');
          if (n.note.textContent !== text) n.note.textContent = text;
        }
      },
    };
  }

  /** The run's steps as a table whose rows open to show input, output and error. */
  function stepsView() {
    const expanded = new Set();
    const el = h('div', { class: 'steps-body' });
    let last = null;
    let record = null;

    function render() {
      const steps = (record && record.steps) || {};
      const paths = Object.keys(steps);
      const focused = el.contains(document.activeElement) ? document.activeElement.dataset.key : null;
      if (!paths.length) {
        fill(el, h('p', { class: 'empty' }, 'No step has started yet.'));
        return;
      }
      const body = h('tbody');
      paths.forEach((path, i) => {
        const s = steps[path] || {};
        const open = expanded.has(path);
        const detailId = `step-detail-${i}`;
        const toggle = h('button', {
          type: 'button', class: 'secondary small', 'aria-expanded': String(open), 'aria-controls': detailId,
          'data-key': `step:${path}`,
        }, open ? 'Hide' : 'Details');
        toggle.addEventListener('click', () => {
          if (expanded.has(path)) expanded.delete(path); else expanded.add(path);
          render();
        });
        body.append(h('tr', { 'data-path': path, 'data-status': s.status, class: 'step-row' },
          h('th', { scope: 'row', 'data-label': 'Step', class: 'id' }, path),
          h('td', { 'data-label': 'Status' }, badge(s.status)),
          h('td', { 'data-label': 'Attempts' }, s.attempts === undefined ? '—' : String(s.attempts)),
          h('td', { 'data-label': 'Started' }, timeEl(s.started_at)),
          h('td', { 'data-label': 'Ended' }, timeEl(s.ended_at)),
          h('td', { 'data-label': 'Took' }, s.started_at && s.ended_at ? duration(s.started_at, s.ended_at) : '—'),
          h('td', { class: 'actions-cell' }, toggle)));
        if (open) {
          const parts = [];
          const part = (label, value) => {
            if (value !== undefined) parts.push(h('div', { class: 'detail' }, h('h4', null, label), jsonBlock(value, `${path}: ${label}`)));
          };
          part('Input', s.input);
          part('Output', s.output);
          part('Error', s.error);
          part('Tripwire', s.tripwire);
          part('Suspended with', s.suspend_payload);
          part('Labels', s.labels);
          part('Resumed with', s.resume_data);
          part('Foreach items', s.items);
          if (s.iteration !== undefined) part('Loop iteration', s.iteration);
          if (s.bail) part('Bailed', s.bail);
          if (!parts.length) parts.push(h('p', { class: 'muted' }, 'Nothing recorded yet.'));
          body.append(h('tr', { class: 'detail-row', id: detailId },
            h('td', { colspan: '7' }, h('div', { class: 'details' }, parts))));
        }
      });
      fill(el, h('div', { class: 'table-wrap' }, h('table', { class: 'cards steps' },
        h('caption', { class: 'visually-hidden' }, 'Steps of the run'),
        h('thead', null, h('tr', null, ['Step', 'Status', 'Attempts', 'Started', 'Ended', 'Took', '']
          .map((c) => h('th', { scope: 'col' }, c || h('span', { class: 'visually-hidden' }, 'Details'))))),
        body)));
      if (focused) {
        const again = el.querySelector(`[data-key="${CSS.escape(focused)}"]`);
        if (again) again.focus();
      }
    }
    return {
      el,
      update(rec) {
        record = rec;
        const key = JSON.stringify(rec && rec.steps);
        if (key === last) return;
        last = key;
        render();
      },
      /** Opens a step's row and moves focus to it. */
      show(path) {
        if (!record || !record.steps || !record.steps[path]) {
          notify(`Step ${path} has not started.`, 'info');
          return;
        }
        expanded.add(path);
        render();
        const button = el.querySelector(`[data-key="${CSS.escape(`step:${path}`)}"]`);
        if (button) {
          button.scrollIntoView({ block: 'center' });
          button.focus();
        }
      },
    };
  }

  /** The live event timeline, and the writer output of steps beside it. */

  Object.assign(self.weft, { kindOf, graphView, stepsView });
})();
