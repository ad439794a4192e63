// The web console of `weft serve`, in a real browser (Debian's Chromium through playwright-core),
// against the real binary: no mocks. Run from the repository root after `cargo build`:
//
//   node tests/browser/console.test.mjs
//
// It starts `target/debug/weft serve --workflows examples` on a fresh home, drives the console
// like a person would (start `approval` with amount 1500, watch it suspend, approve it, watch it
// succeed), checks the "needs attention" filter, the live step output, the token prompt, that
// the page asks nothing of any other origin, that an unknown run's page says so, and that it
// fits a 390 px wide phone. Screenshots go
// to target/browser-artifacts/. It waits on page state only, never on the clock.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const WEFT = process.env.WEFT_BIN || path.join(ROOT, 'target', 'debug', 'weft');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = path.join(ROOT, 'target', 'browser-artifacts');
const WAIT = 30_000;
const WHOLE_TEST = 240_000;
const CHROMIUM_ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

const cleanups = [];
let passed = 0;
let page = null;

/** Fails the test with a clear message. */
function fail(message) {
  throw new Error(message);
}

function check(condition, message) {
  if (!condition) fail(message);
}

/** One named check; its failure names it. */
async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    e.message = `${name}: ${e.message}`;
    throw e;
  }
  passed += 1;
  console.log(`ok ${passed} - ${name}`);
}

function tempDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Starts `weft serve` on a fresh home; resolves to its origin once it prints `serving URL`. */
function serve(extraArgs = [], env = {}) {
  const home = tempDir('weft-console-home-');
  const child = spawn(WEFT, ['--home', home, 'serve', '--addr', '127.0.0.1:0', '--workflows', 'examples', ...extraArgs], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  cleanups.push(() => new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', resolve);
    child.kill('SIGTERM');
  }));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`weft serve printed no address in ${WAIT} ms; its stderr:\n${stderr}`)), WAIT);
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
      const m = /serving (http:\/\/\S+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(new URL(m[1]).origin);
      }
    });
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot start ${WEFT} (${e.message}); build it first with \`cargo build\``));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`weft serve exited with ${code} before serving; its stderr:\n${stderr}`));
    });
  });
}

/** Whether the page is wider than its viewport (it then scrolls sideways). */
async function overflow(p) {
  return p.evaluate(() => ({
    doc: document.documentElement.scrollWidth,
    body: document.body.scrollWidth,
    view: window.innerWidth,
  }));
}

async function fits(p, where) {
  const o = await overflow(p);
  check(o.doc <= o.view && o.body <= o.view,
    `${where}: the page is ${Math.max(o.doc, o.body)} px wide in a ${o.view} px viewport`);
}

async function shot(p, name) {
  await p.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

async function main() {
  check(fs.existsSync(WEFT), `${WEFT} does not exist: run \`cargo build\` first`);
  check(fs.existsSync(CHROMIUM), `${CHROMIUM} does not exist: install it with \`apt-get install -y chromium\``);
  check(fs.existsSync(path.join(ROOT, 'examples', 'plugins', 'approval.wasm')),
    'examples/plugins/approval.wasm does not exist: run `cargo build` first');
  fs.mkdirSync(ARTIFACTS, { recursive: true });

  const origin = await serve();
  console.log(`# serving ${origin}`);

  const context = await chromium.launchPersistentContext(tempDir('weft-console-chromium-'), {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 800 },
  });
  cleanups.unshift(() => context.close());
  context.setDefaultTimeout(WAIT);

  // Every request the pages make, to check none leaves the server's origin (or, later, the
  // second server's).
  const extraOrigins = [];
  const foreign = [];
  const errors = [];
  context.on('request', (r) => {
    const url = new URL(r.url());
    if (url.protocol === 'data:') return;
    const allowed = [origin, ...extraOrigins];
    if (!allowed.includes(url.origin)) foreign.push(r.url());
  });

  page = context.pages()[0] || await context.newPage();
  page.on('pageerror', (e) => errors.push(e.message));

  await step('GET / serves the app shell with its assets and a strict CSP', async () => {
    const res = await page.goto(`${origin}/`);
    check(res.status() === 200, `GET / answered ${res.status()}`);
    const csp = res.headers()['content-security-policy'] || '';
    check(csp.includes("default-src 'none'") && csp.includes("connect-src 'self'"), `CSP is ${JSON.stringify(csp)}`);
    await page.waitForSelector('main h1:text("Runs")');
    await page.waitForSelector('section.runs .runs-body :text("No runs match.")');
  });

  let runId = '';
  await step('a run of approval starts from the form generated from its input schema', async () => {
    await page.click('nav a:text("Start a run")');
    await page.waitForSelector('#start-workflow');
    await page.selectOption('#start-workflow', { label: 'approval (approval.yaml)' });
    await page.waitForSelector('#start-about:text("Approves small orders")');
    const amount = page.getByLabel('amount');
    await amount.fill('1500');
    check(!(await page.locator('#start-input-json').isVisible()), 'the raw JSON box shows beside the form');
    // The form and its JSON are two views of one input.
    await page.click('button:text-is("Edit as JSON")');
    await page.waitForFunction(() => /"amount": 1500/.test(document.getElementById('start-input-json').value));
    await page.click('button:text-is("Edit as form")');
    check(await amount.inputValue() === '1500', 'the amount was lost on the way back to the form');
    await shot(page, 'start-desktop');
    await page.click('#start-submit');
    await page.waitForFunction(() => /^#\/runs\/[^/?]+$/.test(location.hash));
    runId = decodeURIComponent((await page.evaluate(() => location.hash)).slice('#/runs/'.length));
    check(runId.length > 0, 'no run id in the address');
    await page.waitForSelector(`#notice :text("Started run ${runId}.")`);
  });

  await step('the run page shows it suspended, live: status, graph and timeline', async () => {
    await page.waitForSelector('#run-status[data-status="suspended"]');
    check((await page.textContent('#run-status')).includes('suspended'), 'the status is not written out');
    const node = page.locator('.g-node[data-path="approve"]');
    await node.and(page.locator('[data-status="suspended"]')).waitFor();
    const nodeText = await node.textContent();
    check(nodeText.includes('suspended') && nodeText.includes('waiting for manager'),
      `the graph's approve box says ${JSON.stringify(nodeText)}`);
    await page.locator('.g-node[data-path="message"][data-status="not started"]').waitFor();
    for (const type of ['run-started', 'step-started', 'step-suspended', 'run-suspended']) {
      await page.locator(`#timeline li[data-type="${type}"]`).first().waitFor();
    }
    await page.locator('#stream-state[data-state="live"]').waitFor();
    await page.locator('form.resume-card[data-path="approve"]').waitFor();
    check(await page.getByLabel('approved').isVisible(), 'the resume form has no field from the resume schema');
    check(!(await page.locator('#resume-0-json').isVisible()), 'the raw JSON box shows beside the resume form');
    // The step table opens a row to show the step's input.
    const row = page.locator('tr.step-row[data-path="approve"]');
    await row.locator('button:text("Details")').click();
    await page.locator('tr.detail-row pre.json:text("1500")').first().waitFor();
    await shot(page, 'run-suspended-desktop');
  });

  await step('the runs list filters, and "needs attention" lists the suspended run', async () => {
    await page.click('nav a:text-is("Runs")');
    await page.locator(`section.runs tr[data-run="${runId}"][data-status="suspended"]`).waitFor();
    await page.selectOption('#filter-status', 'success');
    await page.waitForFunction(() => location.hash === '#/runs?status=success');
    await page.waitForSelector('section.runs[data-filter="success"] :text("No runs match.")');
    await page.click('nav a:text("Needs attention")');
    await page.waitForSelector('h1:text("Runs that need attention")');
    await page.locator(`section.runs[data-filter="suspended"] tr[data-run="${runId}"]`).waitFor();
    await page.waitForSelector('section.runs[data-filter="failed"] :text("No runs match.")');
    check(await page.locator('nav a[aria-current="page"]:text("Needs attention")').count() === 1,
      'the nav does not mark "Needs attention" as the current page');
    await shot(page, 'attention-desktop');
  });

  await step('approving from the page resumes the run, and it reaches success live', async () => {
    await page.click(`section.runs[data-filter="suspended"] a:text("${runId}")`);
    await page.waitForSelector('#run-status[data-status="suspended"]');
    await page.evaluate(() => { window.stillTheSamePage = true; });
    await page.getByLabel('by', { exact: true }).fill('ana');
    await page.click('form.resume-card[data-path="approve"] button[data-action="approve"]');
    await page.waitForSelector('#notice :text("Resumed approve: approved.")');
    await page.waitForSelector('#run-status[data-status="success"]');
    for (const type of ['run-resumed', 'step-succeeded', 'run-succeeded']) {
      await page.locator(`#timeline li[data-type="${type}"]`).first().waitFor();
    }
    await page.locator('.g-node[data-path="approve"][data-status="success"]').waitFor();
    await page.locator('.g-node[data-path="message"][data-status="success"]').waitFor();
    await page.waitForSelector('.data pre.json:text("Order approved by ana.")');
    await page.locator('#stream-state[data-state="closed"]').waitFor();
    check(await page.evaluate(() => window.stillTheSamePage === true), 'the page was reloaded');
    // An ended run offers a re-run from a step instead of a cancel.
    await page.waitForSelector('#rerun-step');
    check(await page.locator('#cancel-run').count() === 0, 'an ended run still offers a cancel');
    await shot(page, 'run-success-desktop');
  });

  await step('a re-run from a step starts a new run from the page', async () => {
    await page.selectOption('#rerun-step', 'message');
    await page.click('button:text-is("Re-run from this step")');
    await page.waitForFunction((id) => /^#\/runs\/[^/?]+$/.test(location.hash) && !location.hash.endsWith(id), encodeURIComponent(runId));
    await page.waitForSelector('#notice :text("from step message.")');
    await page.waitForSelector('#run-status[data-status="success"]');
    await page.waitForSelector(`dl.meta a:text-is("${runId}")`);
  });

  await step('a suspended run is cancelled from the page after a confirmation', async () => {
    await page.goto(`${origin}/#/start?workflow=approval`);
    await page.getByLabel('amount').fill('5000');
    await page.click('#start-submit');
    await page.waitForSelector('#run-status[data-status="suspended"]');
    await page.click('#cancel-run');
    await page.click('#cancel-yes');
    await page.waitForSelector('#notice :text("cancelled.")');
    await page.waitForSelector('#run-status[data-status="cancelled"]');
    await page.locator('#timeline li[data-type="run-cancelled"]').waitFor();
    await page.locator('.g-node[data-path="approve"][data-status="cancelled"]').waitFor();
  });

  await step('a step\'s writer output is shown, and a schema default fills the form', async () => {
    await page.goto(`${origin}/#/start?workflow=quickstart`);
    const text = page.getByLabel('text');
    await text.waitFor();
    check(await text.inputValue() === 'weft runs sandboxed steps durably', 'the default is not filled in');
    await page.click('#start-submit');
    await page.waitForSelector('#run-status[data-status="success"]');
    await page.waitForSelector('#live-output pre.output[data-path="say"]:text("DURABLY")');
    check((await page.textContent('#live-output pre.output[data-path="say"]')).trim().split('\n').length === 5,
      'the five chunks are not five lines');
  });

  await step('at 390 px the pages fit the screen', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${origin}/#/runs/${encodeURIComponent(runId)}`);
    await page.waitForSelector('#run-status[data-status="success"]');
    await page.locator('.g-node[data-path="message"][data-status="success"]').waitFor();
    await fits(page, 'run page');
    await shot(page, 'run-phone');
    await page.goto(`${origin}/#/runs`);
    await page.locator(`section.runs tr[data-run="${runId}"]`).waitFor();
    await fits(page, 'runs list');
    await shot(page, 'runs-phone');
    await page.goto(`${origin}/#/start?workflow=approval`);
    await page.getByLabel('amount').waitFor();
    await fits(page, 'start page');
    await shot(page, 'start-phone');
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(`${origin}/#/runs`);
    await page.locator(`section.runs tr[data-run="${runId}"]`).waitFor();
    await shot(page, 'runs-desktop');
  });

  await step('a workflow whose plugin is not built says why and is not offered to start', async () => {
    // examples/polyglot.yaml needs examples/python/wordstats.wasm, built only by its build.sh.
    if (fs.existsSync(path.join(ROOT, 'examples', 'python', 'wordstats.wasm'))) return;
    await page.goto(`${origin}/#/start?workflow=polyglot`);
    await page.waitForSelector('#start-about.error:text("This workflow cannot start: plugin wordstats")');
    check(await page.locator('#start-submit').isDisabled(), 'the start button is enabled');
    check(!(await page.textContent('#start-about')).includes(ROOT), 'the note shows a server path');
    await page.selectOption('#start-workflow', { label: 'quickstart (quickstart.yaml)' });
    check(!(await page.locator('#start-submit').isDisabled()), 'a workflow that can start is not offered');
  });

  await step('an unknown run\'s page says there is no such run instead of loading forever', async () => {
    await page.goto(`${origin}/#/runs/no-such-run`);
    await page.waitForSelector('#no-run:text("There is no run no-such-run on this server")');
    check(!(await page.isVisible(':text("Loading the workflow")')), 'the page still says it is loading the workflow');
    await page.waitForSelector('#run-status[data-status="unknown"]');
  });

  await step('the keyboard reaches the controls, and focus is visible', async () => {
    await page.goto(`${origin}/#/runs`);
    await page.waitForSelector('main h1:text("Runs")');
    await page.keyboard.press('Tab');
    const focused = await page.evaluate(() => {
      const el = document.activeElement;
      const style = getComputedStyle(el);
      return { tag: el.tagName, outline: style.outlineStyle, width: style.outlineWidth };
    });
    check(focused.tag === 'A', `Tab first reaches a ${focused.tag}`);
    check(focused.outline !== 'none' && focused.width !== '0px', `the focused link shows no outline: ${JSON.stringify(focused)}`);
  });

  await step('with a token set on the server, a write asks for it and then goes through', async () => {
    const guarded = await serve(['--token-env', 'WEFT_CONSOLE_TEST_TOKEN'], { WEFT_CONSOLE_TEST_TOKEN: 's3cret-token' });
    extraOrigins.push(guarded);
    await page.goto(`${guarded}/#/start?workflow=quickstart`);
    await page.getByLabel('text').waitFor();
    await page.click('#start-submit');
    await page.locator('#token-panel:not([hidden])').waitFor();
    await page.waitForSelector('#token-why:text("takes writes only with its token")');
    await page.fill('#token-input', 's3cret-token');
    await page.click('#token-form button[type="submit"]');
    await page.waitForSelector('#run-status[data-status="success"]');
  });

  await step('nothing was asked of any other origin, and no script error happened', async () => {
    check(foreign.length === 0, `requests left the server's origin: ${foreign.join(', ')}`);
    check(errors.length === 0, `the page threw: ${errors.join(' | ')}`);
  });
}

async function cleanup() {
  for (const c of cleanups.splice(0)) {
    try { await c(); } catch { /* best effort */ }
  }
}

const watchdog = setTimeout(async () => {
  console.error(`not ok - the browser test took longer than ${WHOLE_TEST / 1000} s`);
  await cleanup();
  process.exit(1);
}, WHOLE_TEST);

try {
  await main();
  console.log(`${passed} passed, 0 failed`);
  clearTimeout(watchdog);
  await cleanup();
} catch (e) {
  clearTimeout(watchdog);
  console.error(`not ok - ${e.message}`);
  if (page) {
    try {
      fs.mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: path.join(ARTIFACTS, 'failure.png'), fullPage: true });
      fs.writeFileSync(path.join(ARTIFACTS, 'failure.html'), await page.content());
      console.error(`# the page at the failure: ${path.join(ARTIFACTS, 'failure.png')} and failure.html`);
    } catch { /* the browser may be gone */ }
  }
  console.log(`${passed} passed, 1 failed`);
  await cleanup();
  process.exit(1);
}
