// The weft web console: a single page over the server's own HTTP API (docs/SERVER.md).
// Plain JavaScript, no framework, no build step, nothing loaded from elsewhere.
// Every text the server sends is put in the page with textContent or as a text node,
// never parsed as HTML.
'use strict';

(() => {
  const TOKEN_KEY = 'weft-token';
  const POLL_MS = 2000;
  const MAX_TIMELINE = 1000;
  const TERMINAL = new Set(['success', 'failed', 'cancelled', 'tripwire']);
  const RUN_STATUSES = ['pending', 'running', 'suspended', 'success', 'failed', 'tripwire', 'cancelled'];
  const EVENT_TYPES = [
    'run-started', 'step-started', 'step-output', 'step-custom', 'step-progress', 'step-succeeded',
    'step-failed', 'step-retrying', 'step-suspended', 'step-waiting', 'step-cancelled', 'run-resumed',
    'run-succeeded', 'run-failed', 'run-suspended', 'run-cancelled', 'run-tripwire', 'log', 'event',
  ];
  // Marks from blocks every common font has (no emoji), beside the status word.
  const MARKS = {
    success: '✓', failed: '✗', suspended: '‖', running: '▶', pending: '…', waiting: '◔',
    skipped: '↷', cancelled: '⊘', tripwire: '⚠', 'not started': '○',
  };
  const CLOSING = new Set(['run-succeeded', 'run-failed', 'run-cancelled', 'run-tripwire']);
  const PROPS = new Set(['value', 'checked', 'disabled', 'hidden', 'selected', 'open', 'tabIndex']);

  // ---- DOM helpers -------------------------------------------------------------------------

  /** An element: props are attributes (a few are properties, `on…` are listeners, `text` is
   *  its text); children are nodes or strings (strings become text nodes). */
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k === 'text') el.textContent = v;
        else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
        else if (PROPS.has(k)) el[k] = v;
        else el.setAttribute(k, v === true ? '' : String(v));
      }
    }
    add(el, children);
    return el;
  }

  /** Appends children: nodes as they are, anything else as text. */
  function add(el, children) {
    for (const c of [children].flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : String(c));
    }
    return el;
  }

  /** Replaces an element's children. */
  function fill(el, ...children) {
    el.replaceChildren();
    return add(el, children);
  }

  const main = () => document.getElementById('main');
  let uid = 0;
  const nextId = (base) => `${base}-${++uid}`;

  /** JSON, indented, for display. */
  function pretty(value) {
    try {
      return JSON.stringify(value, null, 2) ?? String(value);
    } catch {
      return String(value);
    }
  }

  function short(text, n) {
    return text.length > n ? `${text.slice(0, n - 1)}…` : text;
  }

  /** A `<pre>` of a value as JSON. */
  function jsonBlock(value, label) {
    return h('pre', { class: 'json', tabindex: '0', 'aria-label': label || null }, pretty(value));
  }

  /** A time, shown in local time, the exact RFC 3339 value in its `datetime` and tooltip. */
  function timeEl(iso) {
    if (!iso) return h('span', { class: 'muted' }, '—');
    const d = new Date(iso);
    const text = Number.isNaN(d.getTime())
      ? iso
      : d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
    return h('time', { datetime: iso, title: iso }, text);
  }

  function clock(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return iso || '';
    const pad = (n, w = 2) => String(n).padStart(w, '0');
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }

  function duration(from, to) {
    const a = Date.parse(from);
    const b = Date.parse(to);
    if (Number.isNaN(a) || Number.isNaN(b)) return '';
    const ms = b - a;
    if (ms < 1000) return `${ms} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
    return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  }

  /** A status as a badge: a mark and the word (never colour alone). */
  function badge(status) {
    const s = status || 'not started';
    return h('span', { class: `badge s-${s.replace(/[^a-z]+/g, '-')}`, 'data-status': s },
      h('span', { class: 'mark', 'aria-hidden': 'true' }, MARKS[s] || '•'), ' ', s);
  }

  const runHref = (id) => `#/runs/${encodeURIComponent(id)}`;

  // ---- notices -----------------------------------------------------------------------------

  let noticeTimer = null;
  let noticeCarries = false;
  /** Says something in the page's status line (read out by screen readers); with `carry`, it
   *  stays through the next change of view (a start says so on the new run's page). */
  function notify(text, kind, carry) {
    const el = document.getElementById('notice');
    clearTimeout(noticeTimer);
    noticeCarries = Boolean(carry);
    el.className = `notice ${kind || 'ok'}`;
    fill(el, text ? h('p', null, text) : null);
    if (text) noticeTimer = setTimeout(() => fill(el), 10000);
  }

  /** An error paragraph for a form. */
  function errorBox() {
    return h('p', { class: 'error', role: 'alert', hidden: true });
  }
  function showError(box, e) {
    box.hidden = false;
    const code = e && e.code ? ` (${e.code})` : '';
    box.textContent = `${(e && e.message) || String(e)}${code}`;
    if (e && e.field) {
      e.field.setAttribute('aria-invalid', 'true');
      e.field.focus();
    }
  }
  function clearError(box, scope) {
    box.hidden = true;
    box.textContent = '';
    if (scope) for (const el of scope.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  }

  // ---- the API -----------------------------------------------------------------------------

  /** A refusal of the API: its HTTP status, its `code` and its message. */
  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  const token = {
    get() {
      try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
    },
    set(v) {
      try { if (v) sessionStorage.setItem(TOKEN_KEY, v); else sessionStorage.removeItem(TOKEN_KEY); } catch { /* storage off */ }
    },
  };

  /** One call of the API; the parsed answer, or an ApiError with the server's words. */
  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const t = token.get();
    if (t && method !== 'GET') headers.Authorization = `Bearer ${t}`;
    let res;
    try {
      res = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: 'no-store',
        credentials: 'same-origin',
      });
    } catch (e) {
      throw new ApiError(0, 'unreachable', `The server cannot be reached (${e.message}).`);
    }
    const text = await res.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch { data = null; }
    }
    if (!res.ok) {
      const err = data && data.error ? data.error : {};
      throw new ApiError(res.status, err.code || `http-${res.status}`, err.message || `The server answered ${res.status}.`);
    }
    return data;
  }

  /** A write: like `api`, but a 401 asks for the token and tries again once it is given. */
  async function write(method, path, body) {
    for (;;) {
      try {
        return await api(method, path, body);
      } catch (e) {
        if (e.status !== 401) throw e;
        await askToken(e.message);
      }
    }
  }

  // ---- the token panel ---------------------------------------------------------------------

  let tokenWaiters = [];
  function tokenPanel(open, why) {
    const panel = document.getElementById('token-panel');
    const toggle = document.getElementById('token-toggle');
    panel.hidden = !open;
    toggle.setAttribute('aria-expanded', String(open));
    const whyEl = document.getElementById('token-why');
    whyEl.classList.toggle('error', Boolean(why));
    if (why) whyEl.textContent = `${why} Enter the token, then save it; the action goes on.`;
    if (open) document.getElementById('token-input').focus();
    else {
      const waiting = tokenWaiters;
      tokenWaiters = [];
      for (const w of waiting) w.reject(new ApiError(401, 'token-required', 'No token was given, so the server refused the write.'));
    }
  }
  function showTokenState() {
    document.getElementById('token-state').textContent = token.get()
      ? 'A token is set for this tab.'
      : 'No token is set: writes are sent without one.';
    document.getElementById('token-toggle').textContent = token.get() ? 'Token ✓' : 'Token';
  }
  /** Opens the token panel and resolves once a token is saved (rejects if it is closed). */
  function askToken(why) {
    return new Promise((resolve, reject) => {
      tokenWaiters.push({ resolve, reject });
      tokenPanel(true, why);
    });
  }
  function setupToken() {
    const toggle = document.getElementById('token-toggle');
    toggle.addEventListener('click', () => tokenPanel(document.getElementById('token-panel').hidden));
    document.getElementById('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const input = document.getElementById('token-input');
      token.set(input.value.trim());
      input.value = '';
      showTokenState();
      const waiting = tokenWaiters;
      tokenWaiters = [];
      document.getElementById('token-panel').hidden = true;
      toggle.setAttribute('aria-expanded', 'false');
      toggle.focus();
      notify(token.get() ? 'Token saved for this tab.' : 'Token cleared.');
      for (const w of waiting) w.resolve();
    });
    document.getElementById('token-forget').addEventListener('click', () => {
      token.set('');
      showTokenState();
      notify('Token forgotten.');
    });
    showTokenState();
  }

  // ---- forms from JSON Schemas -------------------------------------------------------------

  /** A value a field cannot take, with the field to focus. */
  class FieldError extends Error {
    constructor(message, field) {
      super(message);
      this.field = field;
    }
  }

  /** The one type a schema gives, `enum` for enumerations, `null` when it is not that simple. */
  function typeOf(schema) {
    if (!schema || typeof schema !== 'object' || Array.isArray(schema)) return null;
    if (Array.isArray(schema.enum) && schema.enum.length) return 'enum';
    let t = schema.type;
    if (Array.isArray(t)) {
      const some = t.filter((x) => x !== 'null');
      t = some.length === 1 ? some[0] : null;
    }
    if (!t && schema.properties && typeof schema.properties === 'object') return 'object';
    return typeof t === 'string' ? t : null;
  }

  /** Whether the form generator can show an object schema as fields. */
  function formable(schema) {
    return typeOf(schema) === 'object'
      && schema.properties && typeof schema.properties === 'object'
      && Object.keys(schema.properties).length > 0
      && !schema.oneOf && !schema.anyOf && !schema.allOf && !schema.$ref;
  }

  /** The fields of an object schema: `{el, read(lenient), set(value), names}`. */
  function objectFields(schema, initial, base, depth) {
    const required = new Set(Array.isArray(schema.required) ? schema.required : []);
    const fields = Object.entries(schema.properties).map(([name, sub], i) => [
      name,
      field(name, sub, required.has(name), initial && typeof initial === 'object' ? initial[name] : undefined,
        `${base}-${i}-${name.replace(/[^A-Za-z0-9_-]/g, '_')}`, depth),
    ]);
    return {
      el: h('div', { class: 'fields' }, fields.map(([, f]) => f.el)),
      names: new Set(fields.map(([n]) => n)),
      read(lenient) {
        const out = {};
        for (const [name, f] of fields) {
          const r = f.read(lenient);
          if (r.present) out[name] = r.value;
        }
        return out;
      },
      set(value) {
        for (const [name, f] of fields) f.set(value && typeof value === 'object' ? value[name] : undefined);
      },
    };
  }

  /** One field for property `name` of type `schema`. */
  function field(name, schema, required, initial, id, depth) {
    const t = typeOf(schema);
    const s = schema && typeof schema === 'object' ? schema : {};
    const start = initial !== undefined ? initial : s.default;
    const title = typeof s.title === 'string' && s.title ? s.title : name;
    const hintId = typeof s.description === 'string' ? `${id}-hint` : null;
    const hint = hintId ? h('span', { class: 'hint', id: hintId }, s.description) : null;
    const label = (forId) => h('label', { for: forId }, title,
      required ? h('span', { class: 'req' }, ' (required)') : null);
    const missing = (el) => new FieldError(`${title} is required.`, el);
    const wrap = (...kids) => h('div', { class: 'field' }, ...kids);

    if (t === 'object' && formable(s) && depth < 4) {
      const inner = objectFields(s, start, id, depth + 1);
      return {
        el: h('fieldset', { class: 'field nested' },
          h('legend', null, title, required ? h('span', { class: 'req' }, ' (required)') : null), hint, inner.el),
        read(lenient) {
          const v = inner.read(lenient);
          return { present: required || Object.keys(v).length > 0, value: v };
        },
        set(v) { inner.set(v); },
      };
    }
    if (t === 'boolean' && required) {
      const box = h('input', { id, type: 'checkbox', name, 'aria-describedby': hintId });
      const set = (v) => { box.checked = v === true; };
      set(start);
      return {
        el: wrap(h('div', { class: 'check' }, box, label(id)), hint),
        read: () => ({ present: true, value: box.checked }),
        set,
      };
    }
    if (t === 'enum' || t === 'boolean') {
      const choices = t === 'enum' ? s.enum : [true, false];
      const select = h('select', { id, name, 'aria-describedby': hintId },
        required && t === 'enum' ? null : h('option', { value: '' }, '— not set —'),
        choices.map((c, i) => h('option', { value: String(i) }, typeof c === 'string' ? c : JSON.stringify(c))));
      const set = (v) => {
        const i = choices.findIndex((c) => JSON.stringify(c) === JSON.stringify(v));
        select.value = i >= 0 ? String(i) : (select.options[0] ? select.options[0].value : '');
      };
      set(start);
      return {
        el: wrap(label(id), select, hint),
        read(lenient) {
          if (select.value === '') {
            if (required && !lenient) throw missing(select);
            return { present: false };
          }
          return { present: true, value: choices[Number(select.value)] };
        },
        set,
      };
    }
    if (t === 'string' || t === 'number' || t === 'integer') {
      const numeric = t !== 'string';
      const input = h('input', {
        id, name, type: numeric ? 'number' : 'text', step: t === 'integer' ? '1' : (numeric ? 'any' : null),
        min: typeof s.minimum === 'number' ? s.minimum : null,
        max: typeof s.maximum === 'number' ? s.maximum : null,
        'aria-describedby': hintId, autocomplete: 'off', spellcheck: numeric ? null : 'false',
      });
      const set = (v) => { input.value = v === undefined || v === null ? '' : (typeof v === 'object' ? JSON.stringify(v) : String(v)); };
      set(start);
      return {
        el: wrap(label(id), input, hint),
        read(lenient) {
          const raw = input.value;
          if (raw === '' || (numeric && raw.trim() === '')) {
            if (required && !lenient) throw missing(input);
            return { present: false };
          }
          if (!numeric) return { present: true, value: raw };
          const n = Number(raw);
          if (!Number.isFinite(n)) throw new FieldError(`${title} must be a number.`, input);
          if (t === 'integer' && !Number.isInteger(n)) throw new FieldError(`${title} must be a whole number.`, input);
          return { present: true, value: n };
        },
        set,
      };
    }
    // Anything else (arrays, unions, free objects): the field takes JSON.
    const area = h('textarea', {
      id, name, rows: '3', class: 'mono', spellcheck: 'false',
      'aria-describedby': [`${id}-as-json`, hintId].filter(Boolean).join(' '),
    });
    const set = (v) => { area.value = v === undefined ? '' : pretty(v); };
    set(start);
    return {
      el: wrap(label(id), area, h('span', { class: 'hint', id: `${id}-as-json` }, 'as JSON'), hint),
      read(lenient) {
        const raw = area.value.trim();
        if (!raw) {
          if (required && !lenient) throw missing(area);
          return { present: false };
        }
        try {
          return { present: true, value: JSON.parse(raw) };
        } catch (e) {
          throw new FieldError(`${title} is not valid JSON: ${e.message}`, area);
        }
      },
      set,
    };
  }

  /** An editor of a JSON value for `schema`: generated fields when the schema allows, with a
   *  switch to raw JSON; only a JSON textarea when it does not. `{el, read(lenient), set}`. */
  function inputEditor(schema, initial, base, what) {
    const form = formable(schema) ? objectFields(schema, initial, base, 0) : null;
    let mode = form ? 'form' : 'json';
    const areaId = `${base}-json`;
    const area = h('textarea', { id: areaId, rows: '6', class: 'mono', spellcheck: 'false' });
    area.value = pretty(initial !== undefined ? initial : (form ? safeRead(form) : {}));
    const problem = errorBox();
    const jsonPart = h('div', { class: 'field json-edit', hidden: mode !== 'json' },
      h('label', { for: areaId }, `${what} as JSON`), area);
    const formPart = form ? h('div', { class: 'form-part' }, form.el) : null;
    const toggle = form
      ? h('button', { type: 'button', class: 'link-button', 'aria-controls': areaId }, 'Edit as JSON')
      : null;
    if (toggle) {
      toggle.addEventListener('click', () => {
        clearError(problem);
        try {
          if (mode === 'form') {
            area.value = pretty(form.read(true));
            mode = 'json';
          } else {
            const v = area.value.trim() ? JSON.parse(area.value) : {};
            if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error(`the form needs a JSON object`);
            const extra = Object.keys(v).filter((k) => !form.names.has(k));
            if (extra.length) throw new Error(`the form has no field for ${extra.join(', ')}; keep editing JSON`);
            form.set(v);
            mode = 'form';
          }
        } catch (e) {
          showError(problem, e);
          return;
        }
        jsonPart.hidden = mode !== 'json';
        formPart.hidden = mode !== 'form';
        toggle.textContent = mode === 'form' ? 'Edit as JSON' : 'Edit as form';
        const first = (mode === 'form' ? formPart : jsonPart).querySelector('input, select, textarea');
        if (first) first.focus();
      });
    }
    const schemaView = schema && typeof schema === 'object'
      ? h('details', { class: 'schema' }, h('summary', null, `${what} schema`), jsonBlock(schema, `${what} schema`))
      : null;
    const note = form ? null : h('p', { class: 'hint' }, schema
      ? `The form cannot show this schema as fields: type the ${what.toLowerCase()} as JSON.`
      : `No schema describes the ${what.toLowerCase()}: type it as JSON.`);
    return {
      el: h('div', { class: 'editor' }, note, formPart, jsonPart, toggle, problem, schemaView),
      read(lenient) {
        if (mode === 'form') return form.read(lenient);
        const raw = area.value.trim();
        if (!raw) return {};
        try {
          return JSON.parse(raw);
        } catch (e) {
          throw new FieldError(`The ${what.toLowerCase()} is not valid JSON: ${e.message}`, area);
        }
      },
    };
  }

  function safeRead(form) {
    try { return form.read(true); } catch { return {}; }
  }

  /** Runs `action` for a form's submit button: busy while it runs, its error shown in `box`. */
  async function busy(button, box, scope, action) {
    clearError(box, scope);
    const label = button.textContent;
    const buttons = scope ? [...scope.querySelectorAll('button')] : [button];
    for (const b of buttons) b.disabled = true;
    button.textContent = `${label}…`;
    try {
      await action();
    } catch (e) {
      showError(box, e);
    } finally {
      button.textContent = label;
      for (const b of buttons) b.disabled = false;
    }
  }

  // ---- polling -----------------------------------------------------------------------------

  /** Calls `fn` now and every `ms` while the tab is visible, one call at a time. */
  function poller(fn, ms) {
    let timer = null;
    let stopped = false;
    const tick = async () => {
      if (stopped) return;
      if (!document.hidden) {
        try { await fn(); } catch { /* the view shows its own errors */ }
      }
      if (!stopped) timer = setTimeout(tick, ms);
    };
    tick();
    return {
      stop() { stopped = true; clearTimeout(timer); },
      async now() { clearTimeout(timer); await tick(); },
    };
  }

  // ---- the runs list -----------------------------------------------------------------------

  /** A live, paged table of runs with `filter` ({status, workflow}); `{el, dispose, set}`. */
  function runTable(title, filter, limit) {
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
        h('thead', null, h('tr', null, ['Run', 'Workflow', 'Status', 'Created', 'Updated']
          .map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', null, runs.map((r) => h('tr', { 'data-run': r.run_id, 'data-status': r.status },
          h('td', { 'data-label': 'Run', class: 'id' },
            h('a', { href: runHref(r.run_id), 'data-key': `run:${r.run_id}` }, r.run_id)),
          h('td', { 'data-label': 'Workflow' }, r.workflow_id),
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
      dispose: () => poll.stop(),
    };
  }

  /** `#/runs?status=&workflow=&limit=`: filters and one live table (two for "needs attention"). */
  async function runsView(params) {
    const status = params.get('status') || '';
    const workflow = params.get('workflow') || '';
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
    const limitSel = h('select', { id: 'filter-limit', name: 'limit' }, [10, 25, 50, 100].map((n) => h('option', { value: String(n) }, String(n))));
    limitSel.value = String(limit);
    const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter runs', novalidate: true },
      h('div', { class: 'field' }, h('label', { for: 'filter-status' }, 'Status'), statusSel),
      h('div', { class: 'field' }, h('label', { for: 'filter-workflow' }, 'Workflow'), wfInput, ids),
      h('div', { class: 'field' }, h('label', { for: 'filter-limit' }, 'Per page'), limitSel),
      h('div', { class: 'field buttons' }, h('button', { type: 'submit' }, 'Apply'),
        h('a', { href: '#/runs', class: 'button secondary' }, 'Clear')));
    const go = () => {
      const q = new URLSearchParams();
      if (statusSel.value) q.set('status', statusSel.value);
      if (wfInput.value.trim()) q.set('workflow', wfInput.value.trim());
      if (limitSel.value !== '25') q.set('limit', limitSel.value);
      const hash = `#/runs${q.toString() ? `?${q}` : ''}`;
      if (location.hash !== hash) location.hash = hash;
    };
    form.addEventListener('submit', (ev) => { ev.preventDefault(); go(); });
    statusSel.addEventListener('change', go);
    limitSel.addEventListener('change', go);

    const filter = { workflow };
    const tables = attention
      ? [runTable('Suspended: waiting for a resume', { ...filter, status: 'suspended' }, limit),
        runTable('Failed', { ...filter, status: 'failed' }, limit)]
      : [runTable(status ? `Runs with status ${status}` : 'All runs, newest first', { ...filter, status }, limit)];
    fill(main(), h('div', { class: 'view-head' }, heading,
      h('a', { href: '#/start', class: 'button' }, 'Start a run')),
    attention ? h('p', { class: 'hint' }, 'Suspended runs wait for someone to resume them; failed runs may want a re-run from a step.') : null,
    form, tables.map((t) => t.el));
    api('GET', '/workflows').then((list) => {
      fill(ids, (list || []).map((w) => h('option', { value: w.id })));
    }).catch(() => { /* no workflows directory: free text only */ });
    return { title: heading.textContent, focus: heading, dispose: () => tables.forEach((t) => t.dispose()) };
  }

  // ---- starting a run ----------------------------------------------------------------------

  /** `#/start?workflow=ID&from=RUN`: pick a workflow, fill its input, start it. */
  async function startView(params) {
    const heading = h('h1', { tabindex: '-1' }, 'Start a run');
    const area = h('div', null, h('p', { class: 'hint' }, 'Loading the workflows…'));
    fill(main(), h('div', { class: 'view-head' }, heading), area);
    let list;
    try {
      list = await api('GET', '/workflows');
    } catch (e) {
      fill(area, h('p', { class: 'error', role: 'alert' }, e.message));
      return { title: 'Start a run', focus: heading };
    }
    if (!list.length) {
      fill(area, h('p', { class: 'empty' }, 'The workflows directory holds no workflow.'));
      return { title: 'Start a run', focus: heading };
    }
    let initial;
    const from = params.get('from');
    if (from) {
      try { initial = (await api('GET', `/runs/${encodeURIComponent(from)}`)).input; } catch { initial = undefined; }
    }
    const select = h('select', { id: 'start-workflow', name: 'workflow' },
      list.map((w, i) => h('option', { value: String(i) },
        `${w.id === w.file ? w.id : `${w.id} (${w.file})`}${w.problem ? ' (cannot start)' : ''}`)));
    const wanted = list.findIndex((w) => w.id === params.get('workflow') || w.file === params.get('workflow'));
    const startable = list.findIndex((w) => !w.problem);
    select.value = String(wanted >= 0 ? wanted : Math.max(startable, 0));
    const about = h('p', { class: 'hint', id: 'start-about', 'aria-live': 'polite' });
    const editorBox = h('div', { class: 'editor-box' });
    const runId = h('input', { id: 'start-run-id', name: 'run_id', autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'start-run-id-hint' });
    const submit = h('button', { type: 'submit', id: 'start-submit' }, 'Start run');
    const problem = errorBox();
    let editor = null;
    const pick = (useInitial) => {
      const w = list[Number(select.value)];
      about.textContent = w.description || `From ${w.file}.`;
      // A workflow the server knows cannot start (a plugin not built) says why and is not offered.
      about.classList.toggle('error', Boolean(w.problem));
      if (w.problem) about.textContent = `This workflow cannot start: ${w.problem}.`;
      submit.disabled = Boolean(w.problem);
      editor = inputEditor(w.input_schema, useInitial ? initial : undefined, 'start-input', 'Input');
      fill(editorBox, h('fieldset', { class: 'plain' }, h('legend', null, 'Input'), editor.el));
    };
    pick(true);
    select.addEventListener('change', () => pick(false));
    const form = h('form', { class: 'panel start', novalidate: true, 'aria-labelledby': 'start-legend' },
      h('h2', { id: 'start-legend' }, 'Workflow and input'),
      h('div', { class: 'field' }, h('label', { for: 'start-workflow' }, 'Workflow'), select, about),
      editorBox,
      h('div', { class: 'field' }, h('label', { for: 'start-run-id' }, 'Run id (optional)'), runId,
        h('span', { class: 'hint', id: 'start-run-id-hint' }, 'Left empty, the server makes one.')),
      h('div', { class: 'buttons' }, submit), problem);
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      busy(submit, problem, form, async () => {
        const w = list[Number(select.value)];
        const body = { workflow: w.id, input: editor.read(false) };
        if (runId.value.trim()) body.run_id = runId.value.trim();
        let res;
        try {
          res = await write('POST', '/runs', body);
        } catch (e) {
          // Two files with one id: name the file instead.
          if (e.code !== 'ambiguous-workflow') throw e;
          res = await write('POST', '/runs', { ...body, workflow: undefined, file: w.file });
        }
        notify(`Started run ${res.run_id}.`, 'ok', true);
        location.hash = runHref(res.run_id);
      });
    });
    fill(area, form);
    return { title: 'Start a run', focus: heading };
  }

  // ---- the run page ------------------------------------------------------------------------

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
  function timelineView() {
    const list = h('ol', { class: 'timeline', id: 'timeline', 'aria-label': 'Events' });
    const empty = h('p', { class: 'empty' }, 'No events yet.');
    const trimmed = h('p', { class: 'hint', hidden: true }, `Only the latest ${MAX_TIMELINE} events are shown.`);
    const scroller = h('div', { class: 'timeline-wrap', tabindex: '0', 'aria-label': 'Event timeline' }, empty, trimmed, list);
    const outputs = new Map();
    const outBody = h('div', { class: 'outputs' });
    const outPanel = h('section', { class: 'panel', id: 'live-output', 'aria-labelledby': 'output-h', hidden: true },
      h('h2', { id: 'output-h' }, 'Step output'),
      h('p', { class: 'hint' }, 'What steps write while they run, as it arrives.'), outBody);
    return {
      el: scroller,
      outPanel,
      add(ev) {
        empty.hidden = true;
        const atEnd = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;
        const type = String(ev.type || 'event');
        const cat = type.startsWith('run-') ? 'run' : (type === 'log' ? 'log' : 'step');
        const li = h('li', { class: `ev ev-${cat} ev-${type}`, 'data-type': type, 'data-seq': String(ev.seq) },
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
        list.append(li);
        while (list.childElementCount > MAX_TIMELINE) {
          list.firstElementChild.remove();
          trimmed.hidden = false;
        }
        if (atEnd) scroller.scrollTop = scroller.scrollHeight;
        if (type === 'step-output') {
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

  /** The forms that act on a run: resume, cancel, re-run. */
  function actionsView(id, getGraph, refresh) {
    const el = h('div', { class: 'actions' });
    let key = null;

    function resumeCard(s, i, graph) {
      const entry = graph && Array.isArray(graph.entries) ? graph.entries.find((e) => e.path === s.path) : null;
      const [kind, k] = kindOf(entry);
      const schema = kind === 'step' && k.schemas ? k.schemas.resume : null;
      const editor = inputEditor(schema || null, undefined, `resume-${i}`, 'Resume data');
      const props = schema && schema.properties ? schema.properties : null;
      const approvable = !schema || !props || Object.prototype.hasOwnProperty.call(props, 'approved');
      const item = s.foreach_index !== null && s.foreach_index !== undefined ? s.foreach_index : null;
      const submit = h('button', { type: 'submit' }, 'Resume');
      const approve = approvable ? h('button', { type: 'button', class: 'good', 'data-action': 'approve' }, 'Approve') : null;
      const deny = approvable ? h('button', { type: 'button', class: 'bad', 'data-action': 'deny' }, 'Deny') : null;
      const problem = errorBox();
      const headingId = nextId('resume-h');
      const form = h('form', { class: 'resume-card', novalidate: true, 'aria-labelledby': headingId, 'data-path': s.path },
        h('h3', { id: headingId }, 'Resume ', h('code', null, s.path), item !== null ? ` (item ${item})` : ''),
        h('p', null, 'Waiting for: ', h('strong', null, (s.labels || []).join(', ') || 'a resume')),
        s.payload !== undefined && s.payload !== null
          ? h('details', { class: 'payload', open: true }, h('summary', null, 'What the step asks'), jsonBlock(s.payload, 'Suspension payload'))
          : null,
        editor.el,
        h('div', { class: 'buttons' }, approve, deny, submit), problem);
      const send = (button, approved) => busy(button, problem, form, async () => {
        let data = editor.read(approved !== undefined);
        if (approved !== undefined) {
          if (!data || typeof data !== 'object' || Array.isArray(data)) throw new FieldError('The resume data must be a JSON object to approve or deny.');
          data = { ...data, approved };
        }
        const body = { step: s.path, data };
        if (item !== null) body.foreach_index = item;
        await write('POST', `/runs/${encodeURIComponent(id)}/resume`, body);
        notify(`Resumed ${s.path}${approved === true ? ': approved' : approved === false ? ': denied' : ''}.`);
        refresh();
      });
      form.addEventListener('submit', (ev) => { ev.preventDefault(); send(submit); });
      if (approve) approve.addEventListener('click', () => send(approve, true));
      if (deny) deny.addEventListener('click', () => send(deny, false));
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
  async function runView(id) {
    const heading = h('h1', { tabindex: '-1' }, 'Run ', h('span', { class: 'id' }, id));
    const status = h('span', { id: 'run-status', 'data-status': '' });
    const stream = h('span', { id: 'stream-state', class: 'stream', 'data-state': 'connecting' }, 'Connecting…');
    const meta = h('dl', { class: 'meta' });
    const alerts = h('div', { class: 'alerts' });
    const problem = errorBox();
    const graphBox = h('div', { class: 'graph-box' }, h('p', { class: 'hint' }, 'Loading the workflow…'));
    const steps = stepsView();
    const timeline = timelineView();
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
      h('div', { class: 'view-head' }, heading, h('div', { class: 'head-status' }, status, stream)),
      problem, meta, alerts, actions.el,
      h('section', { class: 'panel', 'aria-labelledby': 'graph-h' }, h('h2', { id: 'graph-h' }, 'Workflow'), graphBox),
      h('section', { class: 'panel', 'aria-labelledby': 'steps-h' }, h('h2', { id: 'steps-h' }, 'Steps'), steps.el),
      timeline.outPanel,
      h('section', { class: 'panel', 'aria-labelledby': 'events-h' }, h('h2', { id: 'events-h' }, 'Events'), timeline.el),
      h('section', { class: 'panel', 'aria-labelledby': 'data-h' }, h('h2', { id: 'data-h' }, 'Input, result and state'), dataBox));

    function render() {
      const r = record;
      status.dataset.status = r.status;
      fill(status, badge(r.status));
      document.title = `${r.run_id} (${r.status}) · weft`;
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
      const alertKey = JSON.stringify([r.error, r.tripwire]);
      if (alerts.dataset.key !== alertKey) {
        alerts.dataset.key = alertKey;
        const parts = [];
        if (r.error) {
          parts.push(h('section', { class: 'panel failure', id: 'run-error', 'aria-labelledby': 'run-error-h' },
            h('h2', { id: 'run-error-h' }, 'Error', r.error.step ? ' in step ' : '', r.error.step ? h('code', null, r.error.step) : ''),
            h('p', { class: 'error-message' }, r.error.message || ''),
            r.error.code ? h('p', null, 'Code: ', h('code', null, r.error.code)) : null,
            r.error.details !== undefined && r.error.details !== null ? h('details', null, h('summary', null, 'Details'), jsonBlock(r.error.details, 'Error details')) : null));
        }
        if (r.tripwire) {
          parts.push(h('section', { class: 'panel failure', 'aria-labelledby': 'tripwire-h' },
            h('h2', { id: 'tripwire-h' }, 'Tripwire'), h('p', null, r.tripwire.reason || ''), jsonBlock(r.tripwire, 'Tripwire')));
        }
        fill(alerts, parts);
      }
      if (es && es.readyState === EventSource.CLOSED) {
        setStream('closed', TERMINAL.has(r.status) ? 'Ended: no more events' : 'Event stream closed');
      }
      actions.update(r);
      if (drawing) drawing.update(r);
      steps.update(r);
      const dataKey = JSON.stringify([r.input, r.result, r.state]);
      if (dataBox.dataset.key !== dataKey) {
        dataBox.dataset.key = dataKey;
        const part = (label, value, open) => h('details', { open: open || null }, h('summary', null, label), jsonBlock(value, label));
        fill(dataBox,
          part('Input', r.input, false),
          'result' in r ? part('Result', r.result, true) : null,
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
      timeline.add(ev);
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

  // ---- routing -----------------------------------------------------------------------------

  let current = null;
  let generation = 0;
  let first = true;

  /** Shows the view the location's hash names. */
  async function route() {
    const hash = location.hash || '#/runs';
    if (!hash.startsWith('#/')) return;
    const [path, query] = hash.slice(2).split('?');
    const params = new URLSearchParams(query || '');
    let parts;
    try {
      parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    } catch {
      parts = ['?'];
    }
    if (current && current.dispose) current.dispose();
    current = null;
    if (noticeCarries) noticeCarries = false;
    else notify('');
    const mine = ++generation;
    const section = parts[0] || 'runs';
    for (const a of document.querySelectorAll('[data-nav]')) {
      const on = (a.dataset.nav === 'attention' && section === 'runs' && params.get('status') === 'attention' && !parts[1])
        || (a.dataset.nav === 'runs' && section === 'runs' && params.get('status') !== 'attention' && !parts[1])
        || (a.dataset.nav === 'start' && section === 'start');
      if (on) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    let view;
    if (section === 'attention') {
      location.replace('#/runs?status=attention');
      return;
    } else if (section === 'runs' && parts[1]) {
      view = await runView(parts[1]);
    } else if (section === 'runs') {
      view = await runsView(params);
    } else if (section === 'start') {
      view = await startView(params);
    } else {
      const heading = h('h1', { tabindex: '-1' }, 'Not found');
      fill(main(), heading, h('p', null, 'This console has no such page. ', h('a', { href: '#/runs' }, 'See the runs.')));
      view = { title: 'Not found', focus: heading };
    }
    if (mine !== generation) {
      if (view && view.dispose) view.dispose();
      return;
    }
    current = view;
    if (view && view.title && !(section === 'runs' && parts[1])) document.title = `${view.title} · weft`;
    if (!first && view && view.focus) view.focus.focus({ preventScroll: false });
    first = false;
  }

  document.addEventListener('DOMContentLoaded', () => {
    setupToken();
    window.addEventListener('hashchange', route);
    route();
  });
})();
