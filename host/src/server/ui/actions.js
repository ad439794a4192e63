// The run page's forms that act on a run: resume a suspended step (an approval as two plain
// choices, any other suspension with its resume data), cancel, re-run from a step.
'use strict';

(() => {
  const {
    TERMINAL, h, add, fill, nextId, jsonBlock, notify, errorBox, write, runHref,
    FieldError, typeOf, inputEditor, busy, kindOf,
  } = self.weft;

  // What a person answers to an agent's tool call that waits for approval (docs/AGENTS.md).
  const TOOL_APPROVAL = {
    type: 'object',
    required: ['approved'],
    properties: {
      approved: { type: 'boolean' },
      reason: { type: 'string', description: 'Told to the model when the call is denied.' },
      arguments: { type: 'object', description: 'When approving: the arguments to run the tool with instead of the model\'s.' },
    },
  };

  /** `schema` without its `approved` member, which the Approve and Deny buttons give. */
  function withoutApproved(schema) {
    const properties = { ...schema.properties };
    delete properties.approved;
    const required = Array.isArray(schema.required) ? schema.required.filter((r) => r !== 'approved') : undefined;
    return { ...schema, properties, required };
  }

  function actionsView(id, getGraph, refresh) {
    const el = h('div', { class: 'actions' });
    let key = null;

    function resumeCard(s, i, graph) {
      const entries = graph && Array.isArray(graph.entries) ? graph.entries : [];
      const entry = entries.find((e) => e.path === s.path);
      const [kind, k] = kindOf(entry);
      const agent = entries.find((e) => kindOf(e)[0] === 'agent' && s.path.startsWith(`${e.path}.`));
      const schema = agent ? TOOL_APPROVAL : (kind === 'step' && k.schemas ? k.schemas.resume : null);
      const approval = Boolean(schema && schema.properties && typeOf(schema.properties.approved) === 'boolean');
      const item = s.foreach_index !== null && s.foreach_index !== undefined ? s.foreach_index : null;
      const headingId = nextId('resume-h');
      const where = [h('code', null, s.path), item !== null ? ` (item ${item})` : ''];
      const problem = errorBox();
      const asks = s.payload !== undefined && s.payload !== null
        ? h('details', { class: 'payload', open: true }, h('summary', null, 'What the step asks'), jsonBlock(s.payload, 'Suspension payload'))
        : null;
      const waits = h('p', null, 'Waiting for: ', h('strong', null, (s.labels || []).join(', ') || 'a resume'));
      // What the person answers besides the decision; the decision itself is the button.
      const rest = approval ? withoutApproved(schema) : schema;
      const editor = !approval || Object.keys(rest.properties).length ? inputEditor(rest || null, undefined, `resume-${i}`, approval ? 'Details' : 'Resume data') : null;
      const form = h('form', {
        class: 'resume-card', novalidate: true, 'aria-labelledby': headingId, 'data-path': s.path,
        'data-kind': approval ? 'approval' : 'resume',
      });
      const send = (button, approved) => busy(button, problem, form, async () => {
        let data = editor ? editor.read(false) : {};
        if (approved !== undefined) {
          if (!data || typeof data !== 'object' || Array.isArray(data)) throw new FieldError('The details must be a JSON object.');
          data = { ...data, approved };
        }
        const body = { step: s.path, data };
        if (item !== null) body.foreach_index = item;
        await write('POST', `/runs/${encodeURIComponent(id)}/resume`, body);
        notify(`Resumed ${s.path}${approved === true ? ': approved' : approved === false ? ': denied' : ''}.`);
        refresh();
      });
      if (!approval) {
        const submit = h('button', { type: 'submit', 'data-action': 'resume' }, 'Resume with this data');
        add(form, [h('h3', { id: headingId }, 'Resume ', where), waits, asks,
          h('p', { class: 'explain' }, 'Resuming hands the data below to the step, which goes on with it.'),
          editor.el, h('div', { class: 'buttons' }, submit), problem]);
        form.addEventListener('submit', (ev) => { ev.preventDefault(); send(submit); });
        return form;
      }
      const tool = agent && s.payload && typeof s.payload.tool === 'string' ? s.payload.tool : null;
      const says = agent
        ? {
          approve: `The tool ${tool || ''} runs, with the model's arguments or the ones given above.`,
          deny: 'Nothing runs; the model is told the call was refused, with the reason given above.',
        }
        : {
          approve: 'The step goes on as approved.',
          deny: 'The step goes on as denied: it decides what a denial means.',
        };
      const choice = (action, approved, label, cls) => {
        const button = h('button', { type: 'button', class: cls, 'data-action': action, 'aria-describedby': `${headingId}-${action}` }, label);
        const sends = h('code', { class: 'sends' });
        button.addEventListener('click', () => send(button, approved));
        return {
          el: h('div', { class: `choice ${action}`, 'data-action': action }, button,
            h('p', { id: `${headingId}-${action}` }, h('strong', null, `${label}: `), says[action], ' It sends ', sends, '.')),
          sends, approved,
        };
      };
      const choices = [choice('approve', true, 'Approve', 'good'), choice('deny', false, 'Deny', 'bad')];
      // Each button shows the resume data it sends, as the details are typed.
      const preview = () => {
        let data = {};
        try { data = editor ? editor.read(true) : {}; } catch { data = {}; }
        if (!data || typeof data !== 'object' || Array.isArray(data)) data = {};
        for (const c of choices) c.sends.textContent = JSON.stringify({ ...data, approved: c.approved });
      };
      preview();
      form.addEventListener('input', preview);
      form.addEventListener('change', preview);
      form.addEventListener('submit', (ev) => ev.preventDefault());
      add(form, [h('h3', { id: headingId }, 'Approval asked: ', where), waits, asks,
        h('p', { class: 'explain' }, 'Answer with one of the two buttons: the one you press is the answer. ',
          editor ? 'The details below go with either.' : 'Nothing else is asked.'),
        editor ? editor.el : null,
        h('div', { class: 'choices' }, choices.map((c) => c.el)), problem]);
      return form;
    }

    function cancelPart(record) {
      const ask = h('button', { type: 'button', class: 'bad', id: 'cancel-run' }, 'Cancel run…');
      const yes = h('button', { type: 'button', class: 'bad', id: 'cancel-yes' }, 'Yes, cancel the run');
      const no = h('button', { type: 'button', class: 'secondary' }, 'Keep it');
      const problem = errorBox();
      const confirmBox = h('div', { class: 'confirm', hidden: true, role: 'group', 'aria-label': 'Confirm cancel' },
        h('p', null, `Cancel run ${record.run_id}? Steps in progress are stopped; this cannot be undone.`), yes, no);
      const part = h('section', { class: 'panel action', 'aria-labelledby': 'cancel-h' },
        h('h2', { id: 'cancel-h' }, 'Cancel'), ask, confirmBox, problem);
      ask.addEventListener('click', () => { confirmBox.hidden = false; ask.hidden = true; no.focus(); });
      no.addEventListener('click', () => { confirmBox.hidden = true; ask.hidden = false; ask.focus(); });
      yes.addEventListener('click', () => busy(yes, problem, part, async () => {
        await write('POST', `/runs/${encodeURIComponent(id)}/cancel`);
        notify(`Run ${record.run_id} cancelled.`);
        refresh();
      }));
      return part;
    }

    function rerunPart(record, graph) {
      const started = Object.keys(record.steps || {});
      const inGraph = graph && Array.isArray(graph.entries) ? graph.entries.map((e) => e.path) : [];
      const paths = [...started, ...inGraph.filter((p) => !started.includes(p))];
      if (!paths.length) return null;
      const failed = started.find((p) => record.steps[p].status === 'failed');
      const select = h('select', { id: 'rerun-step', name: 'from_step' }, paths.map((p) => h('option', { value: p }, p)));
      select.value = failed || record.error?.step || paths[0];
      if (!select.value) select.value = paths[0];
      const input = h('textarea', { id: 'rerun-input', rows: '4', class: 'mono', spellcheck: 'false', 'aria-describedby': 'rerun-input-hint' });
      const runId = h('input', { id: 'rerun-run-id', autocomplete: 'off', spellcheck: 'false' });
      const submit = h('button', { type: 'submit' }, 'Re-run from this step');
      const problem = errorBox();
      const form = h('form', { class: 'panel action', novalidate: true, 'aria-labelledby': 'rerun-h' },
        h('h2', { id: 'rerun-h' }, 'Re-run from a step'),
        h('p', { class: 'hint' }, 'Starts a new run that keeps what came before the step and runs it and everything after it again.'),
        h('div', { class: 'field' }, h('label', { for: 'rerun-step' }, 'From step'), select),
        h('details', { class: 'more' }, h('summary', null, 'Other input or run id'),
          h('div', { class: 'field' }, h('label', { for: 'rerun-input' }, 'Step input as JSON (optional)'), input,
            h('span', { class: 'hint', id: 'rerun-input-hint' }, 'Left empty, the step gets the input it had.')),
          h('div', { class: 'field' }, h('label', { for: 'rerun-run-id' }, 'New run id (optional)'), runId)),
        h('div', { class: 'buttons' }, submit), problem);
      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        busy(submit, problem, form, async () => {
          const body = { from_step: select.value };
          if (input.value.trim()) {
            try { body.input = JSON.parse(input.value); } catch (e) { throw new FieldError(`The step input is not valid JSON: ${e.message}`, input); }
          }
          if (runId.value.trim()) body.run_id = runId.value.trim();
          const res = await write('POST', `/runs/${encodeURIComponent(id)}/rerun`, body);
          notify(`Started run ${res.run_id} from step ${body.from_step}.`, 'ok', true);
          location.hash = runHref(res.run_id);
        });
      });
      return form;
    }

    return {
      el,
      update(record) {
        const graph = getGraph();
        const ended = TERMINAL.has(record.status);
        const k = JSON.stringify([record.status, record.suspended || null, Boolean(graph),
          ended ? Object.keys(record.steps || {}) : null]);
        if (k === key) return;
        // Keep what someone is typing: a form is rebuilt only when what it acts on changed.
        key = k;
        const parts = [];
        if (record.status === 'suspended' && Array.isArray(record.suspended) && record.suspended.length) {
          parts.push(h('section', { class: 'panel action resume', 'aria-labelledby': 'resume-h' },
            h('h2', { id: 'resume-h' }, 'Waiting for a resume'),
            record.suspended.map((s, i) => resumeCard(s, i, graph))));
        }
        if (!TERMINAL.has(record.status)) parts.push(cancelPart(record));
        else parts.push(rerunPart(record, graph));
        fill(el, parts);
      },
    };
  }

  /** `#/runs/ID`: the run, its graph, steps and events, live. */

  Object.assign(self.weft, { actionsView });
})();
