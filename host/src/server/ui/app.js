// The console's routes: which view the location's hash names, and the start of it all.
'use strict';

(() => {
  const { h, fill, main, noticeForNewView, setupToken, runsView, startView, workflowsView, workflowView, runView } = self.weft;

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
    noticeForNewView();
    const mine = ++generation;
    const section = parts[0] || 'runs';
    for (const a of document.querySelectorAll('[data-nav]')) {
      const on = (a.dataset.nav === 'attention' && section === 'runs' && params.get('status') === 'attention' && !parts[1])
        || (a.dataset.nav === 'runs' && section === 'runs' && params.get('status') !== 'attention' && !parts[1])
        || (a.dataset.nav === 'start' && section === 'start')
        || (a.dataset.nav === 'workflows' && section === 'workflows');
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
    } else if (section === 'workflows' && parts[1]) {
      view = await workflowView(parts[1]);
    } else if (section === 'workflows') {
      view = await workflowsView();
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
