// The console's lists: runs (live, filtered by status, workflow and tags, paged), the start
// form, and the workflows pages (each workflow with its latest runs, and one workflow's page
// with its start form and runs).
'use strict';

(() => {
  const {
    POLL_MS, RUN_STATUSES, h, fill, main, nextId, clock, timeEl, badge, runHref, runsHref, tagChips,
    notify, errorBox, showError, clearError, api, write, poller, FieldError, inputEditor, busy,
  } = self.weft;

  // ---- tags --------------------------------------------------------------------------------

  /** The `key:value` pieces of `text` split at `sep`, trimmed (around the first `:` too), the
   *  empty ones left out; a piece without `:` is kept as written, for the server to refuse. */
  function tagPieces(text, sep) {
    return String(text || '').split(sep).map((p) => p.trim()).filter(Boolean).map((p) => {
      const at = p.indexOf(':');
      return at < 0 ? p : `${p.slice(0, at).trim()}:${p.slice(at + 1).trim()}`;
    });
  }

  /** A tag filter as `GET /runs?tag=` reads it: `key:value` pieces joined by `,`. */
  const tagFilter = (text) => tagPieces(text, ',').join(',');

  /** The tag filter `filter` with `tag` added (once). */
  function withTag(filter, tag) {
    const pieces = tagPieces(filter, ',');
    return (pieces.includes(tag) ? pieces : [...pieces, tag]).join(',');
  }

  /** The tags written in a start form's `field` (`key:value`, one a line or separated by
   *  commas) as the object `POST /runs` takes; the server checks each against its rule. */
  function readTags(field) {
    const tags = new Map();
    for (const piece of tagPieces(field.value, /[\n,]/)) {
      const at = piece.indexOf(':');
      if (at < 0) throw new FieldError(`Write the tag "${piece}" as key:value, e.g. team:payments.`, field);
      const key = piece.slice(0, at);
      if (tags.has(key)) throw new FieldError(`The tag ${key} is given twice: a run carries one value a key.`, field);
      tags.set(key, piece.slice(at + 1));
    }
    return Object.fromEntries(tags);
  }

  // ---- the runs list -----------------------------------------------------------------------

  /** A live, paged table of runs with `filter` ({status, workflow, tag}); each tag chip links to
   *  `tagHref(tag)`, by default the runs of the same workflow with that tag; `{el, dispose}`. */
  function runTable(title, filter, limit, tagHref) {
    const chipHref = tagHref || ((tag) => runsHref({ workflow: filter.workflow, tag }));
    const headingId = nextId('runs-h');
    const state = { stack: [null], next: null, last: null };
    const body = h('div', { class: 'runs-body' });
    const info = h('p', { class: 'hint live', 'aria-live': 'off' });
    const problem = errorBox();
    const newer = h('button', { type: 'button', class: 'secondary' }, '← Newer');
    const older = h('button', { type: 'button', class: 'secondary' }, 'Older →');
    const pageNo = h('span', { class: 'page-no' });
    const pager = h('div', { class: 'pager', hidden: true }, newer, pageNo, older);
    const el = h('section', { class: 'panel runs', 'aria-labelledby': headingId, 'data-filter': filter.status || 'all' },
      h('h2', { id: headingId }, title), problem, body, pager, info);

    async function load() {
      const q = new URLSearchParams({ limit: String(limit) });
      if (filter.status) q.set('status', filter.status);
      if (filter.workflow) q.set('workflow', filter.workflow);
      if (filter.tag) q.set('tag', filter.tag);
      const cursor = state.stack[state.stack.length - 1];
      if (cursor) q.set('cursor', cursor);
      let page;
      try {
        page = await api('GET', `/runs?${q}`);
      } catch (e) {
        showError(problem, e);
        return;
      }
      clearError(problem);
      state.next = page.next_cursor || null;
      const key = JSON.stringify(page.runs);
      if (key !== state.last) {
        state.last = key;
        rows(page.runs);
      }
      newer.disabled = state.stack.length === 1;
      older.disabled = !state.next;
      pager.hidden = newer.disabled && older.disabled;
      pageNo.textContent = `Page ${state.stack.length}`;
      info.textContent = `Live: updated ${clock(new Date().toISOString()).slice(0, 8)}, refreshed every ${POLL_MS / 1000} s.`;
    }

    function rows(runs) {
      const focused = body.contains(document.activeElement) ? document.activeElement.dataset.key : null;
      if (!runs.length) {
        fill(body, h('p', { class: 'empty' }, state.stack.length > 1 ? 'No more runs.' : 'No runs match.'));
        return;
      }
      const table = h('table', { class: 'cards' },
        h('caption', { class: 'visually-hidden' }, title),
        h('thead', null, h('tr', null, ['Run', 'Workflow', 'Tags', 'Status', 'Created', 'Updated']
          .map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', null, runs.map((r) => h('tr', { 'data-run': r.run_id, 'data-status': r.status },
          h('td', { 'data-label': 'Run', class: 'id' },
            h('a', { href: runHref(r.run_id), 'data-key': `run:${r.run_id}` }, r.run_id)),
          h('td', { 'data-label': 'Workflow' }, r.workflow_id),
          h('td', { 'data-label': 'Tags', class: 'tags-cell' }, tagChips(r.tags, chipHref)),
          h('td', { 'data-label': 'Status' }, badge(r.status)),
          h('td', { 'data-label': 'Created' }, timeEl(r.created_at)),
          h('td', { 'data-label': 'Updated' }, timeEl(r.updated_at))))));
      fill(body, h('div', { class: 'table-wrap' }, table));
      if (focused) {
        const again = body.querySelector(`[data-key="${CSS.escape(focused)}"]`);
        if (again) again.focus();
      }
    }

    const poll = poller(load, POLL_MS);
    newer.addEventListener('click', () => { state.stack.pop(); state.last = null; poll.now(); });
    older.addEventListener('click', () => {
      if (state.next) { state.stack.push(state.next); state.last = null; poll.now(); }
    });
    return {
      el,
      refresh: () => poll.now(),
      dispose: () => poll.stop(),
    };
  }

  // ---- acting on every run a filter shows ---------------------------------------------------

  const ENDED = ['success', 'failed', 'cancelled', 'tripwire'];
  const runs = (n) => `${n} ${n === 1 ? 'run' : 'runs'}`;

  /** The runs a filter ({status, workflow, tag}) shows, in words: "with status suspended, of
   *  workflow approval, tagged team:ops". */
  function filterWords(f) {
    return [f.status ? `with status ${f.status}` : '', f.workflow ? `of workflow ${f.workflow}` : '',
      f.tag ? `tagged ${f.tag.split(',').join(' and ')}` : ''].filter(Boolean).join(', ');
  }

  /** The runs a bulk answer refused, each linked, with the server's reason; `null` if none. */
  function refusedList(answer) {
    const refused = Array.isArray(answer.refused) ? answer.refused : [];
    if (!refused.length) return null;
    return [h('p', null, `Refused for ${runs(refused.length)}:`),
      h('ul', { class: 'refused', 'aria-label': 'Refused runs' }, refused.map((r) => h('li', { 'data-run': r.run_id },
        h('a', { href: runHref(r.run_id), class: 'id' }, r.run_id), `: ${r.message}`)))];
  }

  /** A question asked after a dry run: `ask(text)` shows it with Confirm (unless `canDo` is
   *  false) and Back; Confirm calls `onYes`, Back `onBack`. */
  function confirmBox(idBase, onYes, onBack) {
    const question = h('p', { id: `${idBase}-question`, 'aria-live': 'polite' });
    const extra = h('div');
    const yes = h('button', { type: 'button', class: 'bad', id: `${idBase}-yes` }, 'Confirm');
    const back = h('button', { type: 'button', class: 'secondary', id: `${idBase}-back` }, 'Back');
    const el = h('div', { class: 'confirm', role: 'group', 'aria-labelledby': `${idBase}-question`, hidden: true },
      question, extra, yes, back);
    yes.addEventListener('click', () => onYes(yes));
    back.addEventListener('click', onBack);
    return {
      el,
      ask(text, canDo, more, yesLabel) {
        question.textContent = text;
        fill(extra, more);
        extra.hidden = !more;
        yes.hidden = !canDo;
        yes.textContent = yesLabel || 'Confirm';
        el.hidden = false;
        (canDo ? yes : back).focus();
      },
      close() { el.hidden = true; },
    };
  }

  /** "Cancel all…" and "Resume all…" of every run `filter` shows (all its pages): each counts
   *  first (a dry run) and acts only once confirmed. Disabled with no filter, which would be
   *  every run of the server. */
  function bulkPanel(filter, refresh) {
    const base = {};
    for (const k of ['status', 'workflow', 'tag']) if (filter[k]) base[k] = filter[k];
    const none = !Object.keys(base).length;
    const why = h('p', { class: none ? 'hint reason' : 'hint', id: 'bulk-why' }, none
      ? 'Set a status, workflow or tag filter first: with none, these would act on every run of the server.'
      : `They act on every run ${filterWords(filter)}: all its pages, not only the one shown.`);
    const cancelAll = h('button', { type: 'button', class: 'bad', id: 'bulk-cancel', disabled: none, 'aria-describedby': 'bulk-why' }, 'Cancel all…');
    const resumeAll = h('button', { type: 'button', id: 'bulk-resume', disabled: none, 'aria-describedby': 'bulk-why' }, 'Resume all…');
    const start = h('div', { class: 'buttons' }, cancelAll, resumeAll);
    const label = h('input', { id: 'bulk-label', name: 'label', autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'bulk-label-hint' });
    const data = h('textarea', { id: 'bulk-data', name: 'data', rows: '3', class: 'mono', spellcheck: 'false', placeholder: '{}', 'aria-describedby': 'bulk-data-hint' });
    const count = h('button', { type: 'submit', id: 'bulk-resume-count' }, 'Count the runs to resume');
    const optionsBack = h('button', { type: 'button', class: 'secondary' }, 'Back');
    const options = h('form', { class: 'bulk-options', novalidate: true, hidden: true, 'aria-label': 'Resume every suspended run' },
      h('div', { class: 'field' }, h('label', { for: 'bulk-label' }, 'Label (optional)'), label,
        h('span', { class: 'hint', id: 'bulk-label-hint' }, 'Resume only the suspensions waiting for this label.')),
      h('div', { class: 'field' }, h('label', { for: 'bulk-data' }, 'Resume data as JSON (optional)'), data,
        h('span', { class: 'hint', id: 'bulk-data-hint' }, 'Left empty, each run is resumed with {}.')),
      h('div', { class: 'buttons' }, count, optionsBack));
    const result = h('div', { class: 'bulk-result', id: 'bulk-result', hidden: true });
    const problem = errorBox();
    let pending = null;
    const stage = (name) => {
      start.hidden = name !== 'start';
      options.hidden = name !== 'options';
      if (name !== 'confirm') confirm.close();
    };
    const confirm = confirmBox('bulk', (yes) => busy(yes, problem, part, async () => {
      const { op, body } = pending;
      const answer = await write('POST', `/bulk/${op}`, body);
      const did = op === 'cancel' ? 'Cancelled' : 'Resumed';
      stage('start');
      fill(result, h('p', { id: 'bulk-done', 'data-done': String(answer.done) }, `${did} ${answer.done} of ${runs(answer.matched)}.`),
        refusedList(answer));
      result.hidden = false;
      notify(`${did} ${runs(answer.done)}.`);
      refresh();
      (op === 'cancel' ? cancelAll : resumeAll).focus();
    }), () => {
      stage(pending && pending.op === 'resume' ? 'options' : 'start');
      (pending && pending.op === 'resume' ? count : cancelAll).focus();
    });
    const dry = async (op, body) => {
      result.hidden = true;
      const answer = await write('POST', `/bulk/${op}`, { ...body, dry_run: true });
      pending = { op, body };
      stage('confirm');
      const n = answer.matched - (answer.refused || []).length;
      const verb = op === 'cancel' ? 'cancelled' : 'resumed';
      confirm.ask(answer.matched
        ? `${runs(n)} would be ${verb}.`
        : `No run ${filterWords(filter)} can be ${verb}: ${op === 'cancel' ? 'only pending, running and suspended runs can' : 'only suspended runs can'}.`,
      n > 0, refusedList(answer), `Yes, ${op} ${runs(n)}`);
    };
    cancelAll.addEventListener('click', () => busy(cancelAll, problem, part, () => dry('cancel', base)));
    resumeAll.addEventListener('click', () => { result.hidden = true; stage('options'); label.focus(); });
    optionsBack.addEventListener('click', () => { stage('start'); resumeAll.focus(); });
    options.addEventListener('submit', (ev) => {
      ev.preventDefault();
      busy(count, problem, part, async () => {
        const body = { ...base };
        if (label.value.trim()) body.label = label.value.trim();
        if (data.value.trim()) {
          try { body.data = JSON.parse(data.value); } catch (e) { throw new FieldError(`The resume data is not valid JSON: ${e.message}`, data); }
        }
        await dry('resume', body);
      });
    });
    const part = h('section', { class: 'panel tools-part bulk', 'aria-labelledby': 'bulk-h' },
      h('h2', { id: 'bulk-h' }, 'Every run this filter shows'), why, start, options, confirm.el, result, problem);
    return part;
  }

  /** "Delete old runs…": ended runs older than an age (of a status, of a workflow), counted
   *  first, deleted once confirmed. */
  function prunePanel(filter, refresh) {
    const age = h('input', { id: 'prune-age', name: 'older_than', value: '30d', autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'prune-age-hint' });
    const status = h('select', { id: 'prune-status', name: 'status' },
      h('option', { value: '' }, 'Any ended status'), ENDED.map((s) => h('option', { value: s }, s)));
    status.value = ENDED.includes(filter.status) ? filter.status : '';
    const workflow = h('input', { id: 'prune-workflow', name: 'workflow', value: filter.workflow || '', autocomplete: 'off', spellcheck: 'false', placeholder: 'any workflow' });
    const count = h('button', { type: 'submit', id: 'prune-count' }, 'Count the runs to delete');
    const result = h('p', { id: 'prune-result', hidden: true });
    const problem = errorBox();
    const form = h('form', { class: 'prune-form', novalidate: true, 'aria-label': 'Delete old runs' },
      h('div', { class: 'fields' },
        h('div', { class: 'field' }, h('label', { for: 'prune-age' }, 'Ended at least this long ago'), age,
          h('span', { class: 'hint', id: 'prune-age-hint' }, 'Numbers with units, separated by one space: 30d, 12h, 1h 30m, 0s.')),
        h('div', { class: 'field' }, h('label', { for: 'prune-status' }, 'Status'), status),
        h('div', { class: 'field' }, h('label', { for: 'prune-workflow' }, 'Workflow'), workflow)),
      h('div', { class: 'buttons' }, count));
    let pending = null;
    const confirm = confirmBox('prune', (yes) => busy(yes, problem, part, async () => {
      const answer = await write('POST', '/prune', pending);
      confirm.close();
      form.hidden = false;
      result.textContent = `Deleted ${runs(answer.deleted)}${answer.kept ? `; kept ${runs(answer.kept)} still in use` : ''}; `
        + `${answer.blobs} unused ${answer.blobs === 1 ? 'blob' : 'blobs'} removed, ${answer.bytes} bytes given back.`;
      result.dataset.deleted = String(answer.deleted);
      result.hidden = false;
      notify(`Deleted ${runs(answer.deleted)}.`);
      refresh();
      count.focus();
    }), () => { confirm.close(); form.hidden = false; count.focus(); });
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      busy(count, problem, part, async () => {
        result.hidden = true;
        const body = { older_than: age.value.trim() };
        if (status.value) body.status = status.value;
        if (workflow.value.trim()) body.workflow = workflow.value.trim();
        const answer = await write('POST', '/prune', { ...body, dry_run: true }).catch((e) => {
          if (/older_than/.test(e.message)) e.field = age;
          throw e;
        });
        pending = body;
        form.hidden = true;
        confirm.ask(answer.deleted
          ? `${runs(answer.deleted)} would be deleted${answer.kept ? ` (${runs(answer.kept)} more matched, kept as still in use)` : ''}.`
          : 'No ended run matches: nothing would be deleted.', answer.deleted > 0, null, `Yes, delete ${runs(answer.deleted)}`);
      });
    });
    const part = h('details', { class: 'panel tools-part prune', id: 'prune-tools' },
      h('summary', null, 'Delete old runs…'),
      h('p', { class: 'hint' }, 'Deletes ended runs (success, failed, cancelled, tripwire) with their events, for good; pending, running and suspended runs are never deleted.'),
      form, confirm.el, result, problem);
    return part;
  }

  /** `#/runs?status=&workflow=&tag=&limit=`: filters and one live table (two for "needs
   *  attention"); a tag chip clicked adds its tag to the filter. */
  async function runsView(params) {
    const status = params.get('status') || '';
    const workflow = params.get('workflow') || '';
    const tag = tagFilter(params.get('tag'));
    const limit = [10, 25, 50, 100].includes(Number(params.get('limit'))) ? Number(params.get('limit')) : 25;
    const attention = status === 'attention';
    const heading = h('h1', { tabindex: '-1' }, attention ? 'Runs that need attention' : 'Runs');
    const statusSel = h('select', { id: 'filter-status', name: 'status' },
      h('option', { value: '' }, 'Any status'),
      h('option', { value: 'attention' }, 'Needs attention'),
      RUN_STATUSES.map((s) => h('option', { value: s }, s)));
    statusSel.value = status;
    const listId = nextId('workflow-ids');
    const wfInput = h('input', { id: 'filter-workflow', name: 'workflow', list: listId, autocomplete: 'off', spellcheck: 'false', placeholder: 'any workflow' });
    wfInput.value = workflow;
    const ids = h('datalist', { id: listId });
    const tagInput = h('input', { id: 'filter-tag', name: 'tag', autocomplete: 'off', spellcheck: 'false', placeholder: 'key:value, …', 'aria-describedby': 'filter-tag-hint' });
    tagInput.value = tag;
    const limitSel = h('select', { id: 'filter-limit', name: 'limit' }, [10, 25, 50, 100].map((n) => h('option', { value: String(n) }, String(n))));
    limitSel.value = String(limit);
    const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter runs', novalidate: true },
      h('div', { class: 'field' }, h('label', { for: 'filter-status' }, 'Status'), statusSel),
      h('div', { class: 'field' }, h('label', { for: 'filter-workflow' }, 'Workflow'), wfInput, ids),
      h('div', { class: 'field' }, h('label', { for: 'filter-tag' }, 'Tags'), tagInput,
        h('span', { class: 'visually-hidden', id: 'filter-tag-hint' }, 'key:value; several separated by commas list the runs carrying every one.')),
      h('div', { class: 'field' }, h('label', { for: 'filter-limit' }, 'Per page'), limitSel),
      h('div', { class: 'field buttons' }, h('button', { type: 'submit' }, 'Apply'),
        h('a', { href: '#/runs', class: 'button secondary' }, 'Clear')));
    const go = () => {
      const hash = runsHref({ status: statusSel.value, workflow: wfInput.value.trim(), tag: tagFilter(tagInput.value), limit: limitSel.value });
      if (location.hash !== hash) location.hash = hash;
    };
    form.addEventListener('submit', (ev) => { ev.preventDefault(); go(); });
    statusSel.addEventListener('change', go);
    limitSel.addEventListener('change', go);

    const filter = { workflow, tag };
    const tagHref = (t) => runsHref({ status, workflow, tag: withTag(tag, t), limit });
    const tagged = tag ? `, tagged ${tag.split(',').join(' and ')}` : '';
    const tables = attention
      ? [runTable(`Suspended: waiting for a resume${tagged}`, { ...filter, status: 'suspended' }, limit, tagHref),
        runTable(`Failed${tagged}`, { ...filter, status: 'failed' }, limit, tagHref)]
      : [runTable(`${status ? `Runs with status ${status}` : 'All runs, newest first'}${tagged}`, { ...filter, status }, limit, tagHref)];
    // "Needs attention" acts on its suspended runs: failed ones can be neither cancelled nor resumed.
    const refresh = () => tables.forEach((t) => t.refresh());
    const tools = h('div', { class: 'tools' },
      bulkPanel({ ...filter, status: attention ? 'suspended' : status }, refresh),
      prunePanel({ ...filter, status }, refresh));
    fill(main(), h('div', { class: 'view-head' }, heading,
      h('a', { href: '#/start', class: 'button' }, 'Start a run')),
    attention ? h('p', { class: 'hint' }, 'Suspended runs wait for someone to resume them; failed runs may want a re-run from a step.') : null,
    form, tools, tables.map((t) => t.el));
    api('GET', '/workflows').then((list) => {
      fill(ids, (list || []).map((w) => h('option', { value: w.id })));
    }).catch(() => { /* no workflows directory: free text only */ });
    return { title: heading.textContent, focus: heading, dispose: () => tables.forEach((t) => t.dispose()) };
  }

  // ---- starting a run ----------------------------------------------------------------------

  const workflowName = (w) => (w.id === w.file ? w.id : `${w.id} (${w.file})`);
  const workflowHref = (w) => `#/workflows/${encodeURIComponent(w.file)}`;

  /** The form that starts a run of one of `list`: a choice of workflow unless `fixed`, its
   *  input as fields from its schema, optional tags (filled from `initialTags`) and run id. A
   *  workflow the server knows cannot start (a plugin not built) says why and is not offered. */
  function startForm(list, chosen, initial, fixed, initialTags) {
    const select = fixed ? null : h('select', { id: 'start-workflow', name: 'workflow' },
      list.map((w, i) => h('option', { value: String(i) }, `${workflowName(w)}${w.problem ? ' (cannot start)' : ''}`)));
    if (select) select.value = String(chosen);
    const about = h('p', { class: 'hint', id: 'start-about', 'aria-live': 'polite' });
    const editorBox = h('div', { class: 'editor-box' });
    const runId = h('input', { id: 'start-run-id', name: 'run_id', autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'start-run-id-hint' });
    const tags = h('textarea', { id: 'start-tags', name: 'tags', rows: '2', autocomplete: 'off', spellcheck: 'false', placeholder: 'team:payments', 'aria-describedby': 'start-tags-hint' });
    tags.value = Object.entries(initialTags || {}).map(([k, v]) => `${k}:${v}`).join('\n');
    const submit = h('button', { type: 'submit', id: 'start-submit' }, 'Start run');
    const problem = errorBox();
    let editor = null;
    const picked = () => list[select ? Number(select.value) : chosen];
    const pick = (useInitial) => {
      const w = picked();
      about.textContent = w.description || `From ${w.file}.`;
      about.classList.toggle('error', Boolean(w.problem));
      if (w.problem) about.textContent = `This workflow cannot start: ${w.problem}.`;
      submit.disabled = Boolean(w.problem);
      editor = inputEditor(w.input_schema, useInitial ? initial : undefined, 'start-input', 'Input');
      fill(editorBox, h('fieldset', { class: 'plain' }, h('legend', null, 'Input'), editor.el));
    };
    pick(true);
    if (select) select.addEventListener('change', () => pick(false));
    const form = h('form', { class: 'panel start', novalidate: true, 'aria-labelledby': 'start-legend' },
      h('h2', { id: 'start-legend' }, fixed ? 'Start a run' : 'Workflow and input'),
      select ? h('div', { class: 'field' }, h('label', { for: 'start-workflow' }, 'Workflow'), select, about) : about,
      editorBox,
      h('div', { class: 'field' }, h('label', { for: 'start-tags' }, 'Tags (optional)'), tags,
        h('span', { class: 'hint', id: 'start-tags-hint' }, 'key:value, one a line or separated by commas; the runs list finds the run by them.')),
      h('div', { class: 'field' }, h('label', { for: 'start-run-id' }, 'Run id (optional)'), runId,
        h('span', { class: 'hint', id: 'start-run-id-hint' }, 'Left empty, the server makes one.')),
      h('div', { class: 'buttons' }, submit), problem);
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      busy(submit, problem, form, async () => {
        const w = picked();
        const body = { workflow: w.id, input: editor.read(false) };
        const given = readTags(tags);
        if (Object.keys(given).length) body.tags = given;
        if (runId.value.trim()) body.run_id = runId.value.trim();
        // A tag the server refuses marks the tags field.
        const start = (b) => write('POST', '/runs', b).catch((e) => {
          if (e.code === 'invalid-tag') e.field = tags;
          throw e;
        });
        let res;
        try {
          res = await start(body);
        } catch (e) {
          // Two files with one id: name the file instead.
          if (e.code !== 'ambiguous-workflow') throw e;
          res = await start({ ...body, workflow: undefined, file: w.file });
        }
        notify(`Started run ${res.run_id}.`, 'ok', true);
        location.hash = runHref(res.run_id);
      });
    });
    return form;
  }

  /** The workflows of the directory, or a paragraph saying why there are none. */
  async function workflowList(area) {
    try {
      const list = await api('GET', '/workflows');
      if (list.length) return list;
      fill(area, h('p', { class: 'empty' }, 'The workflows directory holds no workflow.'));
    } catch (e) {
      fill(area, h('p', { class: 'error', role: 'alert' }, e.message));
    }
    return null;
  }

  /** `#/start?workflow=ID&from=RUN`: pick a workflow, fill its input (and tags, from RUN), start
   *  it. */
  async function startView(params) {
    const heading = h('h1', { tabindex: '-1' }, 'Start a run');
    const area = h('div', null, h('p', { class: 'hint' }, 'Loading the workflows…'));
    fill(main(), h('div', { class: 'view-head' }, heading), area);
    const list = await workflowList(area);
    if (!list) return { title: 'Start a run', focus: heading };
    let initial;
    let initialTags;
    const from = params.get('from');
    if (from) {
      try {
        const source = await api('GET', `/runs/${encodeURIComponent(from)}`);
        initial = source.input;
        initialTags = source.tags;
      } catch { initial = undefined; }
    }
    const wanted = list.findIndex((w) => w.id === params.get('workflow') || w.file === params.get('workflow'));
    const startable = list.findIndex((w) => !w.problem);
    fill(area, startForm(list, wanted >= 0 ? wanted : Math.max(startable, 0), initial, false, initialTags));
    return { title: 'Start a run', focus: heading };
  }

  // ---- the workflows pages -----------------------------------------------------------------

  const RECENT = 5;

  /** A workflow's latest runs, read once: a short list of links with their status. */
  async function recentRuns(w, box) {
    try {
      const page = await api('GET', `/runs?${new URLSearchParams({ workflow: w.id, limit: String(RECENT) })}`);
      fill(box, page.runs.length
        ? h('ul', { class: 'recent' }, page.runs.map((r) => h('li', { 'data-run': r.run_id, 'data-status': r.status },
          h('a', { href: runHref(r.run_id), class: 'id' }, r.run_id), ' ', badge(r.status), ' ', timeEl(r.created_at))))
        : h('p', { class: 'empty' }, 'No run yet.'));
    } catch (e) {
      fill(box, h('p', { class: 'error' }, e.message));
    }
  }

  /** `#/workflows`: every workflow of the directory, what it does, its latest runs. */
  async function workflowsView() {
    const heading = h('h1', { tabindex: '-1' }, 'Workflows');
    const area = h('div', null, h('p', { class: 'hint' }, 'Loading the workflows…'));
    fill(main(), h('div', { class: 'view-head' }, heading), area);
    const list = await workflowList(area);
    if (!list) return { title: 'Workflows', focus: heading };
    fill(area, h('ul', { class: 'workflows' }, list.map((w) => {
      const runs = h('div', { class: 'recent-box' }, h('p', { class: 'hint' }, 'Loading its runs…'));
      recentRuns(w, runs);
      const headingId = nextId('wf-h');
      return h('li', { class: 'panel workflow', 'data-workflow': w.id, 'data-file': w.file, 'aria-labelledby': headingId },
        h('h2', { id: headingId }, h('a', { href: workflowHref(w) }, workflowName(w))),
        w.problem
          ? h('p', { class: 'error' }, `This workflow cannot start: ${w.problem}.`)
          : h('p', null, w.description || `From ${w.file}.`),
        h('h3', null, 'Latest runs'), runs,
        h('div', { class: 'buttons' },
          h('a', { href: workflowHref(w), class: `button${w.problem ? ' secondary' : ''}` }, w.problem ? 'See why' : 'Start a run'),
          h('a', { href: `#/runs?workflow=${encodeURIComponent(w.id)}`, class: 'button secondary' }, 'All its runs')));
    })));
    return { title: 'Workflows', focus: heading };
  }

  /** `#/workflows/FILE`: one workflow, its start form and its runs, live. */
  async function workflowView(file) {
    const heading = h('h1', { tabindex: '-1' }, 'Workflow ', h('span', { class: 'id' }, file));
    const area = h('div', null, h('p', { class: 'hint' }, 'Loading the workflow…'));
    fill(main(), h('div', { class: 'view-head' }, heading, h('a', { href: '#/workflows', class: 'button secondary' }, 'All workflows')), area);
    const list = await workflowList(area);
    const at = list ? list.findIndex((w) => w.file === file) : -1;
    if (at < 0) {
      if (list) fill(area, h('p', { class: 'error', id: 'no-workflow' }, `The workflows directory has no file ${file}.`));
      return { title: `Workflow ${file}`, focus: heading };
    }
    const w = list[at];
    fill(heading, 'Workflow ', h('span', { class: 'id' }, w.id));
    const runs = runTable(`Runs of ${w.id}, newest first`, { workflow: w.id }, 10);
    fill(area, h('p', { class: 'hint' }, `File ${w.file}.`), startForm(list, at, undefined, true), runs.el);
    return { title: `Workflow ${w.id}`, focus: heading, dispose: runs.dispose };
  }

  Object.assign(self.weft, { runsView, startView, workflowsView, workflowView });
})();
