// The weft web console: a single page over the server's own HTTP API (docs/SERVER.md).
// Plain JavaScript, no framework, no build step, nothing loaded from elsewhere.
// Every text the server sends is put in the page with textContent or as a text node,
// never parsed as HTML.
//
// The console is several files of named purpose that the server joins, in the order ui.rs
// lists them, into the one script `/ui/app.js`. Each file is a function that takes what it
// needs from the shared namespace `self.weft` and puts there what the later files use.
// This one holds what every view uses: DOM helpers, formats, notices, the API, the token panel,
// polling.
'use strict';

(() => {
  const TOKEN_KEY = 'weft-token';
  const POLL_MS = 2000;
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

  /** A length of time in milliseconds, written for people. */
  function lasting(ms) {
    if (ms < 1000) return `${Math.round(ms)} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
    return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  }

  function duration(from, to) {
    const a = Date.parse(from);
    const b = Date.parse(to);
    if (Number.isNaN(a) || Number.isNaN(b)) return '';
    return lasting(b - a);
  }

  /** A status as a badge: a mark and the word (never colour alone). */
  function badge(status) {
    const s = status || 'not started';
    return h('span', { class: `badge s-${s.replace(/[^a-z]+/g, '-')}`, 'data-status': s },
      h('span', { class: 'mark', 'aria-hidden': 'true' }, MARKS[s] || '•'), ' ', s);
  }

  const runHref = (id) => `#/runs/${encodeURIComponent(id)}`;

  /** The runs list's address with filters `f` ({status, workflow, tag, limit}); 25 a page is
   *  the default, left out. */
  function runsHref(f) {
    const q = new URLSearchParams();
    if (f.status) q.set('status', f.status);
    if (f.workflow) q.set('workflow', f.workflow);
    if (f.tag) q.set('tag', f.tag);
    if (f.limit && Number(f.limit) !== 25) q.set('limit', String(f.limit));
    return `#/runs${q.toString() ? `?${q}` : ''}`;
  }

  /** A run's tags as small `key:value` chips, each a link to `href(tag)` (a list filtered by
   *  it); `null` when it has none. */
  function tagChips(tags, href) {
    const entries = Object.entries(tags || {});
    if (!entries.length) return null;
    return h('ul', { class: 'tags', 'aria-label': 'Tags' }, entries.map(([k, v]) => {
      const tag = `${k}:${v}`;
      return h('li', null, h('a', { href: href(tag), class: 'tag', 'data-tag': tag, title: `Runs tagged ${tag}` }, tag));
    }));
  }


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


  /** Clears the status line for a new view, unless the last notice asked to carry over. */
  function noticeForNewView() {
    if (noticeCarries) noticeCarries = false;
    else notify('');
  }

  self.weft = {
    POLL_MS, TERMINAL, RUN_STATUSES, EVENT_TYPES, CLOSING,
    h, add, fill, main, nextId, pretty, short, jsonBlock, timeEl, clock, lasting, duration, badge, runHref,
    runsHref, tagChips, notify, noticeForNewView, errorBox, showError, clearError,
    ApiError, api, write, setupToken, poller,
  };
})();
