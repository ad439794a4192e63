// The run page's list of events, live, narrowed by kind, by a text search over each event's
// type, path and data, and by a scope the timeline picks (a step, a foreach item, a loop
// iteration); and the writer output of its steps beside it.
'use strict';

(() => {
  const { EVENT_TYPES, h, fill, pretty, short, jsonBlock, clock } = self.weft;

  // Events drawn in the list at once: the latest that match.
  const MAX_SHOWN = 1000;

  const under = (path, block) => path === block || path.startsWith(`${block}.`);

  /** Whether event `ev` is of `scope` ({kind: step | item | iteration, block, index}). */
  function inScope(ev, scope) {
    if (!scope) return true;
    if (!ev.path || !under(ev.path, scope.block)) return false;
    if (scope.kind === 'step') return true;
    if (scope.kind === 'iteration') return ev.path !== scope.block && ev.iteration === scope.index;
    // A foreach tells of an item's end on its own path, with the item's index in its data.
    if (ev.path === scope.block) return ev.type === 'step-progress' && ev.data && ev.data.index === scope.index;
    return ev.foreach_index === scope.index;
  }

  function eventsView() {
    const all = [];
    const filter = { kind: '', text: '', scope: null };
    const kind = h('select', { id: 'events-kind', name: 'kind' },
      h('option', { value: '' }, 'Every kind'),
      EVENT_TYPES.filter((t) => t !== 'event').map((t) => h('option', { value: t }, t)));
    const search = h('input', {
      id: 'events-search', name: 'search', type: 'search', autocomplete: 'off', spellcheck: 'false',
      placeholder: 'a path, an error, a value…', 'aria-describedby': 'events-search-hint',
    });
    const scopeText = h('span', { class: 'scope-text' });
    const scopeClear = h('button', { type: 'button', class: 'secondary small', id: 'events-scope-clear' }, 'Show every step');
    const scopeBox = h('p', { class: 'scope', id: 'events-scope', hidden: true }, scopeText, ' ', scopeClear);
    const count = h('p', { class: 'hint', id: 'events-count', 'aria-live': 'polite' });
    const list = h('ol', { class: 'timeline', id: 'event-list', 'aria-label': 'Events' });
    const empty = h('p', { class: 'empty' }, 'No events yet.');
    const scroller = h('div', { class: 'timeline-wrap', tabindex: '0', 'aria-label': 'Event list' }, empty, list);
    const form = h('form', { class: 'filters events-filter', role: 'search', 'aria-label': 'Filter events', novalidate: true },
      h('div', { class: 'field' }, h('label', { for: 'events-kind' }, 'Kind'), kind),
      h('div', { class: 'field' }, h('label', { for: 'events-search' }, 'Search'), search,
        h('span', { class: 'hint', id: 'events-search-hint' }, 'Matches the type, the path and the data.')));
    form.addEventListener('submit', (ev) => ev.preventDefault());

    const outputs = new Map();
    const outBody = h('div', { class: 'outputs' });
    const outPanel = h('section', { class: 'panel', id: 'live-output', 'aria-labelledby': 'output-h', hidden: true },
      h('h2', { id: 'output-h' }, 'Step output'),
      h('p', { class: 'hint' }, 'What steps write while they run, as it arrives.'), outBody);

    function matches(ev) {
      if (filter.kind && ev.type !== filter.kind) return false;
      if (!inScope(ev, filter.scope)) return false;
      if (!filter.text) return true;
      if (ev.search === undefined) {
        ev.search = `${ev.type} ${ev.path || ''} ${ev.data === undefined ? '' : JSON.stringify(ev.data)}`.toLowerCase();
      }
      return ev.search.includes(filter.text);
    }

    function item(ev) {
      const type = String(ev.type || 'event');
      const cat = type.startsWith('run-') ? 'run' : (type === 'log' ? 'log' : 'step');
      const li = h('li', {
        class: `ev ev-${cat} ev-${type}`, 'data-type': type, 'data-seq': String(ev.seq),
        'data-item': ev.foreach_index !== undefined ? String(ev.foreach_index) : null,
        'data-iteration': ev.iteration !== undefined ? String(ev.iteration) : null,
      },
      h('span', { class: 'ev-seq' }, `#${ev.seq}`),
      h('time', { datetime: ev.at, title: ev.at, class: 'ev-at' }, clock(ev.at)),
      h('span', { class: 'ev-type' }, type),
      ev.path ? h('span', { class: 'ev-path' }, ev.path) : null,
      ev.foreach_index !== undefined ? h('span', { class: 'ev-extra' }, `item ${ev.foreach_index}`) : null,
      ev.iteration !== undefined ? h('span', { class: 'ev-extra' }, `iteration ${ev.iteration}`) : null);
      if (type === 'step-output') {
        li.append(h('code', { class: 'ev-text' }, typeof ev.data === 'string' ? ev.data : pretty(ev.data)));
      } else if (ev.data !== undefined && ev.data !== null) {
        const text = JSON.stringify(ev.data);
        li.append(h('details', { class: 'ev-data' }, h('summary', null, short(text, 90)), jsonBlock(ev.data, `event ${ev.seq} data`)));
      }
      return li;
    }

    let shownCount = 0;
    function counted() {
      const narrowed = filter.kind || filter.text || filter.scope;
      count.textContent = narrowed
        ? `${shownCount} of ${all.length} events match${shownCount > MAX_SHOWN ? `; the latest ${MAX_SHOWN} are shown` : ''}.`
        : `${all.length} events${all.length > MAX_SHOWN ? `; the latest ${MAX_SHOWN} are shown` : ''}.`;
      empty.hidden = list.childElementCount > 0;
      empty.textContent = all.length ? 'No event matches.' : 'No events yet.';
    }

    /** Draws the list again from every event kept, as the filter now says. */
    function redraw() {
      const hits = all.filter(matches);
      shownCount = hits.length;
      fill(list, hits.slice(-MAX_SHOWN).map(item));
      counted();
    }

    kind.addEventListener('change', () => { filter.kind = kind.value; redraw(); });
    search.addEventListener('input', () => { filter.text = search.value.trim().toLowerCase(); redraw(); });
    scopeClear.addEventListener('click', () => {
      filter.scope = null;
      scopeBox.hidden = true;
      redraw();
      search.focus();
    });

    return {
      el: h('div', { class: 'events' }, form, scopeBox, count, scroller),
      outPanel,
      /** Every event received so far, in order: what the timeline is drawn from. */
      events: all,
      /** Narrows the list to one step, foreach item or loop iteration, and shows it. */
      scope(scope) {
        filter.scope = scope;
        scopeText.textContent = `Only the events of ${scope.label}.`;
        scopeBox.hidden = false;
        redraw();
        scroller.scrollIntoView({ block: 'nearest' });
        scopeClear.focus();
      },
      add(ev) {
        all.push(ev);
        if (matches(ev)) {
          const atEnd = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;
          shownCount += 1;
          list.append(item(ev));
          while (list.childElementCount > MAX_SHOWN) list.firstElementChild.remove();
          if (atEnd) scroller.scrollTop = scroller.scrollHeight;
        }
        counted();
        if (ev.type === 'step-output') {
          const path = ev.path || '(run)';
          let pre = outputs.get(path);
          if (!pre) {
            pre = h('pre', { class: 'output', 'data-path': path, tabindex: '0', 'aria-label': `Output of ${path}` });
            outputs.set(path, pre);
            outBody.append(h('h3', null, path), pre);
            outPanel.hidden = false;
          }
          pre.append(`${typeof ev.data === 'string' ? ev.data : JSON.stringify(ev.data)}\n`);
          pre.scrollTop = pre.scrollHeight;
        }
      },
    };
  }

  Object.assign(self.weft, { eventsView });
})();
