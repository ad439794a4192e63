// The run page: its status and tags, its outcome first, then what waits for a person, the
// timeline, the workflow drawn, the steps, the events, input and state; live over the run's
// event stream.
'use strict';

(() => {
  const {
    POLL_MS, TERMINAL, EVENT_TYPES, CLOSING, h, fill, main, jsonBlock, timeEl, duration, badge, runHref,
    runsHref, tagChips, errorBox, showError, clearError, api, poller, graphView, stepsView, timelineView, eventsView, actionsView,
  } = self.weft;

  async function runView(id) {
    const heading = h('h1', { tabindex: '-1' }, 'Run ', h('span', { class: 'id' }, id));
    const status = h('span', { id: 'run-status', 'data-status': '' });
    const tags = h('div', { id: 'run-tags', class: 'run-tags' });
    const stream = h('span', { id: 'stream-state', class: 'stream', 'data-state': 'connecting' }, 'Connecting…');
    const meta = h('dl', { class: 'meta' });
    const outcome = h('div', { class: 'outcome', id: 'run-outcome' });
    const problem = errorBox();
    const graphBox = h('div', { class: 'graph-box' }, h('p', { class: 'hint' }, 'Loading the workflow…'));
    const steps = stepsView();
    const events = eventsView();
    const timeline = timelineView((scope) => events.scope(scope));
    const dataBox = h('div', { class: 'data' });
    let record = null;
    let graph = null;
    let drawing = null;
    let disposed = false;
    let es = null;
    let lastSeq = 0;
    let refreshTimer = null;
    let inflight = false;
    let again = false;
    // The server has no such run (404): nothing to poll for.
    let missing = false;

    const actions = actionsView(id, () => graph, () => schedule());
    fill(main(),
      h('div', { class: 'view-head' }, heading, h('div', { class: 'head-status' }, status, tags, stream)),
      outcome, problem, meta, actions.el,
      h('section', { class: 'panel', 'aria-labelledby': 'timeline-h' }, h('h2', { id: 'timeline-h' }, 'Timeline'), timeline.el),
      h('section', { class: 'panel', 'aria-labelledby': 'graph-h' }, h('h2', { id: 'graph-h' }, 'Workflow'), graphBox),
      h('section', { class: 'panel', 'aria-labelledby': 'steps-h' }, h('h2', { id: 'steps-h' }, 'Steps'), steps.el),
      events.outPanel,
      h('section', { class: 'panel', 'aria-labelledby': 'events-h' }, h('h2', { id: 'events-h' }, 'Events'), events.el),
      h('section', { class: 'panel', 'aria-labelledby': 'data-h' }, h('h2', { id: 'data-h' }, 'Input and state'), dataBox));

    function render() {
      const r = record;
      status.dataset.status = r.status;
      fill(status, badge(r.status));
      document.title = `${r.run_id} (${r.status}) · weft`;
      // Its tags beside its status, each a link to the runs that carry it.
      const tagsKey = JSON.stringify(r.tags || {});
      if (tags.dataset.key !== tagsKey) {
        tags.dataset.key = tagsKey;
        fill(tags, tagChips(r.tags, (tag) => runsHref({ tag })));
      }
      const metaKey = JSON.stringify([r.workflow_id, r.created_at, r.updated_at, r.restarted_from]);
      if (meta.dataset.key !== metaKey) {
        meta.dataset.key = metaKey;
        fill(meta,
          h('div', null, h('dt', null, 'Workflow'), h('dd', null,
            h('a', { href: `#/runs?workflow=${encodeURIComponent(r.workflow_id)}` }, r.workflow_id), ' · ',
            h('a', { href: `#/start?workflow=${encodeURIComponent(r.workflow_id)}&from=${encodeURIComponent(r.run_id)}` }, 'start again with this input'))),
          h('div', null, h('dt', null, 'Created'), h('dd', null, timeEl(r.created_at))),
          h('div', null, h('dt', null, 'Updated'), h('dd', null, timeEl(r.updated_at))),
          r.restarted_from ? h('div', null, h('dt', null, 'Re-run of'), h('dd', null,
            h('a', { href: runHref(r.restarted_from.run_id) }, r.restarted_from.run_id), ' from step ', h('code', null, r.restarted_from.path))) : null);
      }
      // How an ended run ended comes first: its result, its error, or why it stopped.
      const outcomeKey = JSON.stringify([r.status, r.result, r.error, r.tripwire]);
      if (outcome.dataset.key !== outcomeKey) {
        outcome.dataset.key = outcomeKey;
        const parts = [];
        const took = `${duration(r.created_at, r.updated_at)} after it was created`;
        if (r.status === 'success') {
          parts.push(h('section', { class: 'panel success', id: 'run-result', 'aria-labelledby': 'run-result-h' },
            h('h2', { id: 'run-result-h' }, 'Result'),
            h('p', null, badge('success'), ` Ended at `, timeEl(r.updated_at), `, ${took}.`),
            jsonBlock(r.result, 'Result')));
        }
        if (r.status === 'cancelled') {
          parts.push(h('section', { class: 'panel', id: 'run-cancelled', 'aria-labelledby': 'run-cancelled-h' },
            h('h2', { id: 'run-cancelled-h' }, 'Cancelled'),
            h('p', null, 'The run was cancelled at ', timeEl(r.updated_at), `, ${took}; it has no result.`)));
        }
        if (r.error) {
          parts.push(h('section', { class: 'panel failure', id: 'run-error', 'aria-labelledby': 'run-error-h' },
            h('h2', { id: 'run-error-h' }, 'Failed', r.error.step ? ' in step ' : '', r.error.step ? h('code', null, r.error.step) : ''),
            h('p', { class: 'error-message' }, r.error.message || ''),
            h('p', { class: 'hint' }, 'Ended at ', timeEl(r.updated_at), `, ${took}.`),
            r.error.code ? h('p', null, 'Code: ', h('code', null, r.error.code)) : null,
            r.error.details !== undefined && r.error.details !== null ? h('details', null, h('summary', null, 'Details'), jsonBlock(r.error.details, 'Error details')) : null));
        }
        if (r.tripwire) {
          parts.push(h('section', { class: 'panel failure', 'aria-labelledby': 'tripwire-h' },
            h('h2', { id: 'tripwire-h' }, 'Tripwire'), h('p', null, r.tripwire.reason || ''), jsonBlock(r.tripwire, 'Tripwire')));
        }
        fill(outcome, parts);
      }
      if (es && es.readyState === EventSource.CLOSED) {
        setStream('closed', TERMINAL.has(r.status) ? 'Ended: no more events' : 'Event stream closed');
      }
      actions.update(r);
      if (drawing) drawing.update(r);
      steps.update(r);
      timeline.update(events.events, r, graph);
      const dataKey = JSON.stringify([r.input, r.state]);
      if (dataBox.dataset.key !== dataKey) {
        dataBox.dataset.key = dataKey;
        const part = (label, value, open) => h('details', { open: open || null }, h('summary', null, label), jsonBlock(value, label));
        fill(dataBox,
          part('Input', r.input, false),
          part('State', r.state, false));
      }
    }

    async function refresh() {
      if (disposed) return;
      if (inflight) { again = true; return; }
      inflight = true;
      try {
        record = await api('GET', `/runs/${encodeURIComponent(id)}`);
        clearError(problem);
        render();
      } catch (e) {
        showError(problem, e);
        if (e.status === 404 && !record) {
          missing = true;
          status.dataset.status = 'unknown';
          fill(status, badge('no such run'));
          fill(graphBox, h('p', { class: 'hint', id: 'no-run' },
            `There is no run ${id} on this server: check the id, or find the run in `,
            h('a', { href: '#/runs' }, 'the list of runs'), '.'));
        }
      } finally {
        inflight = false;
        if (again && !disposed) { again = false; schedule(); }
      }
    }
    function schedule() {
      if (refreshTimer || disposed) return;
      refreshTimer = setTimeout(() => { refreshTimer = null; refresh(); }, 100);
    }

    function setStream(state, text) {
      stream.dataset.state = state;
      stream.textContent = text;
    }
    function onEvent(message) {
      let ev;
      try { ev = JSON.parse(message.data); } catch { return; }
      if (!ev || typeof ev.seq !== 'number' || ev.seq <= lastSeq) return;
      lastSeq = ev.seq;
      events.add(ev);
      schedule();
      // Nothing follows a closing event: stop here rather than reconnect to hear so.
      if (CLOSING.has(ev.type) && es) {
        es.close();
        setStream('closed', 'Ended: no more events');
      }
    }
    function connect() {
      es = new EventSource(`/runs/${encodeURIComponent(id)}/events`);
      for (const t of EVENT_TYPES) es.addEventListener(t, onEvent);
      es.onmessage = onEvent;
      es.onopen = () => setStream('live', 'Live');
      es.onerror = () => {
        if (!es) return;
        if (es.readyState === EventSource.CLOSED) {
          setStream('closed', record && TERMINAL.has(record.status) ? 'Ended: no more events' : 'Event stream closed');
        } else {
          setStream('reconnecting', 'Reconnecting…');
        }
        schedule();
      };
    }

    let fallback = null;
    await refresh();
    if (record) {
      try {
        const def = await api('GET', `/runs/${encodeURIComponent(id)}/workflow`);
        graph = def.graph;
        drawing = graphView(graph, (path) => steps.show(path));
        fill(graphBox, drawing.el,
          h('details', { class: 'mermaid' }, h('summary', null, 'Mermaid source'), h('pre', { class: 'json', tabindex: '0' }, def.mermaid || '')));
        render();
      } catch (e) {
        fill(graphBox, h('p', { class: 'error' }, `The workflow cannot be shown: ${e.message}`));
      }
      if (!disposed) connect();
    } else {
      setStream('closed', '');
      if (!missing) fill(graphBox, h('p', { class: 'hint' }, 'The workflow is shown once the run can be read.'));
    }
    // While the event stream is not open (closed, refused, reconnecting), poll instead.
    fallback = poller(async () => {
      if (missing) return;
      // The bars of what runs or waits grow with the clock, not only with events.
      if (record && !TERMINAL.has(record.status)) timeline.update(events.events, record, graph);
      if (es && es.readyState === EventSource.OPEN) return;
      if (record && TERMINAL.has(record.status) && es && es.readyState === EventSource.CLOSED) return;
      await refresh();
    }, POLL_MS);
    return {
      title: `Run ${id}`,
      focus: heading,
      dispose() {
        disposed = true;
        clearTimeout(refreshTimer);
        if (fallback) fallback.stop();
        if (es) { es.close(); es = null; }
      },
    };
  }


  Object.assign(self.weft, { runView });
})();
