// The web console of `weft serve`, in a real browser (Debian's Chromium through playwright-core),
// against the real binary: no mocks. Run from the repository root after `cargo build`:
//
//   node tests/browser/console.test.mjs
//
// It starts `target/debug/weft serve --workflows examples` on a fresh home, drives the console
// like a person would (start `approval` with amount 1500, watch it suspend, approve it, watch it
// succeed with its result at the top; deny another), checks the "needs attention" filter, the
// workflows page, the live step output, the tags of runs (chips in the list and on the run
// page, the tag filter, a chip that filters, the start form's tags and a refused tag), the token
// prompt, that the page asks nothing of any other origin, that an unknown run's page says so,
// and that it fits a 390 px wide phone. A third server checks "Cancel all", "Resume all" (off
// with no filter) and "Delete old runs": each a dry run's count, then the confirmed action. A
// second server, over a workflow the test writes (a foreach whose items are retried, a loop, a
// sleep, a retried step, a suspension), checks the timeline, its items and iterations, and the
// event filter. Screenshots go to target/browser-artifacts/. It waits on page state only, never
// on the clock.

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

/** Starts `weft serve` over `workflows` on a fresh home; resolves to its origin once it prints
 *  `serving URL`. */
function serve(extraArgs = [], env = {}, workflows = 'examples') {
  const home = tempDir('weft-console-home-');
  const child = spawn(WEFT, ['--home', home, 'serve', '--addr', '127.0.0.1:0', '--workflows', workflows, ...extraArgs], {
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
      await page.locator(`#event-list li[data-type="${type}"]`).first().waitFor();
    }
    await page.locator('#stream-state[data-state="live"]').waitFor();
    await page.locator('form.resume-card[data-path="approve"][data-kind="approval"]').waitFor();
    check(await page.getByLabel('by', { exact: true }).isVisible(), 'the resume form has no field from the resume schema');
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

  await step('the approval form says what Approve and Deny each send, with no field of its own for the answer', async () => {
    await page.click(`section.runs[data-filter="suspended"] a:text("${runId}")`);
    const form = page.locator('form.resume-card[data-path="approve"][data-kind="approval"]');
    await form.waitFor();
    check(await form.getByLabel('approved').count() === 0, 'the form still has an `approved` field beside the buttons');
    check((await form.locator('.explain').textContent()).includes('the one you press is the answer'),
      'the form does not say that the button pressed is the answer');
    await form.getByLabel('by', { exact: true }).fill('ana');
    await form.locator('.choice[data-action="approve"] code.sends:text-is(\'{"by":"ana","approved":true}\')').waitFor();
    await form.locator('.choice[data-action="deny"] code.sends:text-is(\'{"by":"ana","approved":false}\')').waitFor();
    const approve = await form.locator('.choice[data-action="approve"] p').textContent();
    const deny = await form.locator('.choice[data-action="deny"] p').textContent();
    check(approve.startsWith('Approve: ') && /as approved/.test(approve), `Approve says ${JSON.stringify(approve)}`);
    check(deny.startsWith('Deny: ') && /as denied/.test(deny), `Deny says ${JSON.stringify(deny)}`);
    check(await form.locator('button[data-action="resume"]').count() === 0, 'a third button competes with Approve and Deny');
    await shot(page, 'approval-desktop');
    await page.click('nav a:text("Needs attention")');
    await page.locator(`section.runs[data-filter="suspended"] tr[data-run="${runId}"]`).waitFor();
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
      await page.locator(`#event-list li[data-type="${type}"]`).first().waitFor();
    }
    await page.locator('.g-node[data-path="approve"][data-status="success"]').waitFor();
    await page.locator('.g-node[data-path="message"][data-status="success"]').waitFor();
    await page.waitForSelector('#run-result pre.json:text("Order approved by ana.")');
    // The result comes first: before the timeline, the graph and the events, in the first screen.
    const top = await page.evaluate(() => {
      window.scrollTo(0, 0);
      const result = document.getElementById('run-result');
      const after = ['timeline', 'event-list'].every((id) => result.compareDocumentPosition(document.getElementById(id)) & Node.DOCUMENT_POSITION_FOLLOWING);
      return { after, top: result.getBoundingClientRect().top, view: window.innerHeight };
    });
    check(top.after && top.top < top.view / 2, `the result is not at the top: ${JSON.stringify(top)}`);
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
    await page.locator('#event-list li[data-type="run-cancelled"]').waitFor();
    await page.locator('.g-node[data-path="approve"][data-status="cancelled"]').waitFor();
  });

  await step('Deny resumes the step as denied', async () => {
    await page.goto(`${origin}/#/start?workflow=approval`);
    await page.getByLabel('amount').fill('2000');
    await page.click('#start-submit');
    await page.waitForSelector('#run-status[data-status="suspended"]');
    const form = page.locator('form.resume-card[data-path="approve"][data-kind="approval"]');
    await form.getByLabel('by', { exact: true }).fill('bob');
    await form.locator('button[data-action="deny"]').click();
    await page.waitForSelector('#notice :text("Resumed approve: denied.")');
    await page.waitForSelector('#run-status[data-status="success"]');
    await page.waitForSelector('#run-result pre.json:text("Order rejected by bob.")');
  });

  await step('the workflows page lists each workflow with its runs, and starts one', async () => {
    await page.click('nav a:text("Workflows")');
    await page.waitForSelector('main h1:text-is("Workflows")');
    check(await page.locator('nav a[aria-current="page"]:text("Workflows")').count() === 1, 'the nav does not mark "Workflows"');
    const approval = page.locator('li.workflow[data-workflow="approval"]');
    await approval.locator(`ul.recent li[data-run="${runId}"][data-status="success"]`).waitFor();
    check((await approval.textContent()).includes('Approves small orders'), 'the card does not say what approval does');
    await page.locator('li.workflow[data-workflow="quickstart"] .recent-box :text("No run yet.")').waitFor();
    if (!fs.existsSync(path.join(ROOT, 'examples', 'python', 'wordstats.wasm'))) {
      await page.locator('li.workflow[data-workflow="polyglot"] .error:text("This workflow cannot start")').waitFor();
    }
    await shot(page, 'workflows-desktop');
    await approval.locator('a:text("Start a run")').click();
    await page.waitForFunction(() => location.hash === '#/workflows/approval.yaml');
    await page.waitForSelector('main h1:text("Workflow approval")');
    check(await page.locator('#start-workflow').count() === 0, 'the workflow page asks again which workflow');
    await page.locator(`section.runs tr[data-run="${runId}"]`).waitFor();
    await page.getByLabel('amount').fill('10');
    await page.click('#start-submit');
    await page.waitForSelector('#run-status[data-status="success"]');
    await page.waitForSelector('#run-result pre.json:text("Order approved by auto.")');
    const started = decodeURIComponent((await page.evaluate(() => location.hash)).slice('#/runs/'.length));
    await page.goBack();
    await page.locator(`section.runs tr[data-run="${started}"][data-status="success"]`).waitFor();
    if (!fs.existsSync(path.join(ROOT, 'examples', 'python', 'wordstats.wasm'))) {
      await page.goto(`${origin}/#/workflows/polyglot.yaml`);
      await page.waitForSelector('#start-about.error:text("This workflow cannot start")');
      check(await page.locator('#start-submit').isDisabled(), 'a workflow that cannot start offers its start');
    }
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
    await page.goto(`${origin}/#/workflows`);
    await page.locator(`li.workflow[data-workflow="approval"] ul.recent li[data-run="${runId}"]`).waitFor();
    await fits(page, 'workflows page');
    await shot(page, 'workflows-phone');
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(`${origin}/#/runs`);
    await page.locator(`section.runs tr[data-run="${runId}"]`).waitFor();
    await shot(page, 'runs-desktop');
  });

  await step('runs carry tags: chips in the list and on the run page, filters by tag, a chip that filters', async () => {
    const start = async (tags) => {
      const res = await fetch(`${origin}/runs`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ workflow: 'quickstart', tags }),
      });
      const text = await res.text();
      check(res.status === 201, `POST /runs with tags answered ${res.status}: ${text}`);
      return JSON.parse(text).run_id;
    };
    const pay = await start({ team: 'payments', env: 'prod' });
    const ops = await start({ team: 'ops' });
    // The start form sends its tags, and shows the server's refusal of a bad one on the field.
    await page.goto(`${origin}/#/start?workflow=quickstart`);
    await page.getByLabel('text').waitFor();
    await page.getByLabel('Tags (optional)').fill('bad key:x');
    await page.click('#start-submit');
    const refusal = await page.waitForSelector('form.start .error:text("invalid tag \\"bad key:x\\": a key is made of")');
    check((await refusal.textContent()).includes('(invalid-tag)'), 'the refusal does not name its code');
    check(await page.getAttribute('#start-tags', 'aria-invalid') === 'true', 'the refused tags field is not marked');
    await page.fill('#start-tags', 'team:payments\nenv : staging');
    await page.click('#start-submit');
    await page.waitForFunction(() => /^#\/runs\/[^/?]+$/.test(location.hash));
    const formed = decodeURIComponent((await page.evaluate(() => location.hash)).slice('#/runs/'.length));
    await page.waitForSelector('#run-status[data-status="success"]');
    const onPage = await page.locator('.head-status #run-tags a.tag').evaluateAll((els) => els.map((e) => e.textContent));
    check(JSON.stringify(onPage) === '["env:staging","team:payments"]', `the run page shows the tags ${JSON.stringify(onPage)}`);
    await shot(page, 'run-tags-desktop');

    const listed = () => page.locator('section.runs tbody tr').evaluateAll((els) => els.map((e) => e.dataset.run).sort());
    const only = (...ids) => JSON.stringify([...ids].sort());
    // A filter's view is new once its heading names its tags.
    const filtered = async (hash, heading, ...ids) => {
      await page.waitForFunction((h) => location.hash === h, hash);
      await page.waitForSelector(`section.runs h2:text("${heading}")`);
      await page.locator(`section.runs tr[data-run="${ids[0]}"]`).waitFor();
      check(await listed().then(JSON.stringify) === only(...ids), `${hash} lists ${JSON.stringify(await listed())}, not ${only(...ids)}`);
    };

    await page.goto(`${origin}/#/runs`);
    const payRow = page.locator(`section.runs tr[data-run="${pay}"]`);
    await payRow.locator('a.tag[data-tag="team:payments"]').waitFor();
    const chips = await payRow.locator('td[data-label="Tags"] a.tag').evaluateAll((els) => els.map((e) => e.textContent));
    check(JSON.stringify(chips) === '["env:prod","team:payments"]', `the list shows the tags ${JSON.stringify(chips)}`);
    await page.locator(`section.runs tr[data-run="${ops}"] a.tag[data-tag="team:ops"]`).waitFor();
    check(await page.locator(`section.runs tr[data-run="${runId}"] a.tag`).count() === 0, 'an untagged run shows tags');
    await shot(page, 'runs-tags-desktop');

    // The filter's input, alone and with another tag, in the address like the other filters.
    await page.fill('#filter-tag', 'team:payments');
    await page.press('#filter-tag', 'Enter');
    await filtered('#/runs?tag=team%3Apayments', 'tagged team:payments', pay, formed);
    await page.fill('#filter-tag', 'team:payments, env:prod');
    await page.press('#filter-tag', 'Enter');
    await filtered('#/runs?tag=team%3Apayments%2Cenv%3Aprod', 'tagged team:payments and env:prod', pay);
    // With the status: the filters combine.
    await page.fill('#filter-tag', 'team:ops');
    await page.selectOption('#filter-status', 'success');
    await filtered('#/runs?status=success&tag=team%3Aops', 'tagged team:ops', ops);
    check(await page.inputValue('#filter-tag') === 'team:ops', 'the tag filter is not kept in the form');

    // A chip filters by its tag, added to the tags already filtered by.
    await page.goto(`${origin}/#/runs`);
    await page.click(`section.runs tr[data-run="${ops}"] a.tag[data-tag="team:ops"]`);
    await filtered('#/runs?tag=team%3Aops', 'tagged team:ops', ops);
    await page.goto(`${origin}/#/runs?tag=team%3Apayments`);
    await page.click(`section.runs tr[data-run="${formed}"] a.tag[data-tag="env:staging"]`);
    await filtered('#/runs?tag=team%3Apayments%2Cenv%3Astaging', 'tagged team:payments and env:staging', formed);
    // So does a chip on a run's page.
    await page.goto(`${origin}/#/runs/${encodeURIComponent(pay)}`);
    await page.click('#run-tags a.tag[data-tag="env:prod"]');
    await filtered('#/runs?tag=env%3Aprod', 'tagged env:prod', pay);
    // "Start again" keeps the tags.
    await page.goto(`${origin}/#/start?workflow=quickstart&from=${encodeURIComponent(pay)}`);
    await page.getByLabel('text').waitFor();
    check(await page.inputValue('#start-tags') === 'env:prod\nteam:payments', 'starting again does not fill the tags in');

    // A filter the server cannot read shows its refusal, as other refusals are shown.
    await page.goto(`${origin}/#/runs`);
    await page.fill('#filter-tag', 'nocolon');
    await page.press('#filter-tag', 'Enter');
    await page.waitForFunction(() => location.hash === '#/runs?tag=nocolon');
    await page.waitForSelector('section.runs .error[role="alert"]:text("invalid tag \\"nocolon\\": write a tag as `key:value`")');
    check(await page.locator('section.runs tbody tr').count() === 0, 'a refused filter still lists runs');
    await shot(page, 'runs-tag-refused-desktop');

    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${origin}/#/runs`);
    await payRow.locator('a.tag[data-tag="env:prod"]').waitFor();
    await fits(page, 'runs list with tags');
    await shot(page, 'runs-tags-phone');
    await page.goto(`${origin}/#/runs/${encodeURIComponent(pay)}`);
    await page.locator('#run-tags a.tag[data-tag="env:prod"]').waitFor();
    await fits(page, 'run page with tags');
    await shot(page, 'run-tags-phone');
    await page.setViewportSize({ width: 1280, height: 800 });
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

  await step('"Cancel all", "Resume all" and "Delete old runs" act on the runs a filter shows, after a dry run', async () => {
    // A server of its own, so the counts are exactly the runs started here.
    const bulk = await serve();
    extraOrigins.push(bulk);
    const start = async (tags) => (await (await fetch(`${bulk}/runs`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ workflow: 'approval', input: { amount: 1500 }, tags }) })).json()).run_id;
    const [a, b] = [[await start({ batch: 'a' }), await start({ batch: 'a' })], [await start({ batch: 'b' }), await start({ batch: 'b' })]];
    const kept = await start({ batch: 'c' });
    const row = (id, status) => page.locator(`section.runs tr[data-run="${id}"]${status ? `[data-status="${status}"]` : ''}`);
    const filterBy = async (tag) => {
      await page.fill('#filter-tag', tag);
      await page.press('#filter-tag', 'Enter');
      await page.waitForSelector(`section.runs h2:text("tagged ${tag}")`);
    };
    await page.goto(`${bulk}/#/runs`);
    for (const id of [...a, ...b, kept]) await row(id, 'suspended').waitFor();
    // With no filter, one click would act on every run: the buttons are off, and say why.
    check(await page.isDisabled('#bulk-cancel') && await page.isDisabled('#bulk-resume'), 'the bulk buttons are enabled with no filter');
    check((await page.textContent('#bulk-why')).includes('Set a status, workflow or tag filter first')
      && await page.getAttribute('#bulk-cancel', 'aria-describedby') === 'bulk-why', 'the disabled buttons give no reason');

    // Cancel all: a dry run's count, Back changes nothing, Confirm cancels.
    await filterBy('batch:a');
    check((await page.textContent('#bulk-why')).includes('tagged batch:a'), 'the panel does not say which runs it acts on');
    await page.click('#bulk-cancel');
    await page.waitForSelector('#bulk-question:text-is("2 runs would be cancelled.")');
    await page.click('#bulk-back');
    for (const id of a) check(await row(id, 'suspended').count() === 1, 'Back cancelled a run');
    await page.click('#bulk-cancel');
    await page.waitForSelector('#bulk-question:text-is("2 runs would be cancelled.")');
    await shot(page, 'bulk-confirm-desktop');
    await page.click('#bulk-yes');
    await page.waitForSelector('#bulk-done[data-done="2"]:text("Cancelled 2 of 2 runs.")');
    for (const id of a) await row(id, 'cancelled').waitFor();
    // Resume all, with a label and data; bad JSON is refused on its field first.
    await filterBy('batch:b');
    await page.click('#bulk-resume');
    await page.fill('#bulk-label', 'manager');
    await page.fill('#bulk-data', '{"approved": true,');
    await page.click('#bulk-resume-count');
    await page.waitForSelector('section.bulk .error:text("The resume data is not valid JSON")');
    check(await page.getAttribute('#bulk-data', 'aria-invalid') === 'true', 'the bad data field is not marked');
    await page.fill('#bulk-data', '{"approved": true, "by": "bulk"}');
    await page.click('#bulk-resume-count');
    await page.waitForSelector('#bulk-question:text-is("2 runs would be resumed.")');
    await page.click('#bulk-yes');
    await page.waitForSelector('#bulk-done[data-done="2"]:text("Resumed 2 of 2 runs.")');
    for (const id of b) await row(id, 'success').waitFor();
    check((await (await fetch(`${bulk}/runs/${b[0]}`)).text()).includes('Order approved by bulk.'), 'the data did not reach the runs');

    // Delete old runs: an age that does not read is refused with the server's words; 0s counts
    // every ended run, and once confirmed they are gone from the list, the suspended one kept.
    await page.goto(`${bulk}/#/runs`);
    await row(kept, 'suspended').waitFor();
    await page.click('#prune-tools > summary');
    check(await page.inputValue('#prune-age') === '30d', 'the age is not 30d to begin with');
    await page.fill('#prune-age', 'soon');
    await page.click('#prune-count');
    await page.waitForSelector('#prune-tools .error[role="alert"]:text("older_than")');
    check(await page.getAttribute('#prune-age', 'aria-invalid') === 'true', 'the refused age is not marked');
    await page.fill('#prune-age', '0s');
    await page.click('#prune-count');
    await page.waitForSelector('#prune-question:text-is("4 runs would be deleted.")');
    for (const id of [...a, ...b]) check(await row(id).count() === 1, 'the dry run deleted a run');
    await page.click('#prune-yes');
    await page.waitForSelector('#prune-result[data-deleted="4"]:text("Deleted 4 runs")');
    for (const id of [...a, ...b]) await row(id).waitFor({ state: 'detached' });
    check(await page.locator('section.runs tbody tr').count() === 1 && await row(kept, 'suspended').count() === 1, 'the suspended run is not the one kept');
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

  // A workflow the test writes for the timeline: a foreach of three items, two at a time, whose
  // step fails once and passes on its retry; a loop of three iterations; a sleep; a step retried
  // once; a step that suspends. Its plugin is copied beside it, as workflow paths are relative.
  const flows = tempDir('weft-console-workflows-');
  fs.mkdirSync(path.join(flows, 'plugins'));
  fs.copyFileSync(path.join(ROOT, 'examples', 'plugins', 'testkit.wasm'), path.join(flows, 'plugins', 'testkit.wasm'));
  fs.writeFileSync(path.join(flows, 'timeline.yaml'), `id: timeline
description: Items retried once, a loop, a sleep, a retried step and a suspension.
input-schema:
  type: object
  properties:
    items: { default: [1, 2, 3] }
plugins:
  kit: { wasm: plugins/testkit.wasm }
steps:
  - map: { id: list, expr: '.input.items' }
  - foreach:
      id: each
      concurrency: 2
      do:
        id: flaky
        plugin: kit
        step: fail
        config: { code: flaky, message: fails once, retryable: true, succeed-on-attempt: 1 }
        retry: { attempts: 2, delay-ms: 60 }
  - map: { id: zero, expr: '{n: 0}' }
  - loop:
      id: count
      do-until: '.output.n >= 3'
      do: { id: inc, plugin: kit, step: inc }
  - sleep: { id: pause, ms: 180 }
  - id: flaky-top
    plugin: kit
    step: fail
    config: { code: flaky, message: fails once, retryable: true, succeed-on-attempt: 1 }
    retry: { attempts: 2, delay-ms: 60 }
  - { id: ask, plugin: kit, step: suspend, config: { labels: [reviewer] } }
`);
  let flowsOrigin = '';

  await step('the timeline draws attempts, retries, the sleep and the suspension to scale', async () => {
    flowsOrigin = await serve([], {}, flows);
    extraOrigins.push(flowsOrigin);
    await page.goto(`${flowsOrigin}/#/start?workflow=timeline`);
    await page.getByLabel('items').waitFor();
    await page.click('#start-submit');
    await page.waitForSelector('#run-status[data-status="suspended"]');
    await page.locator('#timeline .gantt-row[data-path="ask"] .seg[data-kind="suspended"]').waitFor();
    for (const p of ['list', 'each', 'zero', 'count', 'pause', 'flaky-top', 'ask']) {
      await page.locator(`#timeline .gantt-row[data-path="${p}"]`).waitFor();
    }
    const flaky = page.locator('#timeline .gantt-row[data-path="flaky-top"]');
    const attempts = await flaky.locator('.seg[data-kind="attempt"]').evaluateAll((els) => els.map((e) => e.dataset.status));
    check(JSON.stringify(attempts) === '["failed","success"]', `flaky-top's attempts are ${JSON.stringify(attempts)}`);
    check(await flaky.locator('.seg[data-kind="retry-wait"]').count() === 1, 'flaky-top shows no delay before its retry');
    check((await flaky.textContent()).includes('2 attempts'), 'flaky-top does not say it took 2 attempts');
    check(await page.locator('#timeline .gantt-row[data-path="pause"] .seg[data-kind="sleep"]').count() === 1, 'the sleep is not drawn as one');
    // One measure of every bar: inside its track, and as wide as its time says.
    const bars = await page.evaluate(() => [...document.querySelectorAll('#timeline .gantt-row[data-key]')].flatMap((row) => {
      const track = row.querySelector('.gantt-track').getBoundingClientRect();
      return [...row.querySelectorAll('.seg')].map((seg) => {
        const r = seg.getBoundingClientRect();
        return { path: row.dataset.path, kind: seg.dataset.kind, ms: Number(seg.dataset.ms), left: r.left, right: r.right, width: r.width, track: [track.left, track.right] };
      });
    }));
    for (const b of bars) {
      check(b.width >= 1 && b.left >= b.track[0] - 0.5 && b.right <= b.track[1] + 0.5, `a bar is out of its track: ${JSON.stringify(b)}`);
    }
    const scaled = bars.filter((b) => b.ms >= 40 && b.kind !== 'suspended');
    const perMs = scaled.map((b) => b.width / b.ms).sort((x, y) => x - y);
    check(scaled.length >= 3 && perMs[perMs.length - 1] / perMs[0] < 1.25,
      `bars are not to one scale: ${JSON.stringify(scaled.map((b) => [b.path, b.kind, b.ms, Math.round(b.width)]))}`);
    const sleep = bars.find((b) => b.path === 'pause' && b.kind === 'sleep');
    const delay = bars.find((b) => b.path === 'flaky-top' && b.kind === 'retry-wait');
    check(sleep.ms >= 170 && delay.ms === 60 && sleep.width > 2 * delay.width, `the sleep ${JSON.stringify(sleep)} beside the delay ${JSON.stringify(delay)}`);
    await shot(page, 'timeline-desktop');
  });

  await step('the timeline opens into each foreach item and loop iteration, and narrows the events to one', async () => {
    await page.click('#timeline .gantt-row[data-path="each"]:not([data-item]) button.gantt-name');
    const items = page.locator('#timeline .gantt-row[data-path="each"][data-item]');
    await items.nth(2).waitFor();
    check(await items.count() === 3, `the foreach opens into ${await items.count()} items`);
    for (let i = 0; i < 3; i += 1) {
      const row = page.locator(`#timeline .gantt-row[data-path="each"][data-item="${i}"]`);
      check(await row.locator('.seg[data-kind="attempt"][data-status="failed"]').count() === 1
        && await row.locator('.seg[data-kind="retry-wait"]').count() === 1
        && await row.locator('.seg[data-kind="attempt"][data-status="success"]').count() === 1,
      `item ${i} does not show a failed attempt, a delay and a passing attempt`);
    }
    await page.click('#timeline .gantt-row[data-path="each"][data-item="1"] button.gantt-name');
    await page.waitForSelector('#timeline-detail:has-text("item 1")');
    check((await page.textContent('#timeline-detail')).includes('attempt 2'), 'the item\'s detail does not list its attempts');
    await page.locator('#timeline-detail pre.json:text("\\"index\\": 1")').first().waitFor();
    const total = await page.locator('#event-list li').count();
    await page.click('#timeline-only');
    await page.waitForSelector('#events-scope:has-text("Only the events of item 1 of each.")');
    const scoped = await page.locator('#event-list li').evaluateAll((els) => els.map((e) => [e.dataset.type, e.dataset.item]));
    check(scoped.length >= 2 && scoped.length < total
      && scoped.every(([type, item]) => item === '1' || type === 'step-progress'), `item 1's events are ${JSON.stringify(scoped)}`);
    await page.click('#events-scope-clear');
    await page.waitForFunction((n) => document.querySelectorAll('#event-list li').length === n, total);

    await page.click('#timeline .gantt-row[data-path="count"]:not([data-iteration]) button.gantt-name');
    const iterations = page.locator('#timeline .gantt-row[data-path="count"][data-iteration]');
    await iterations.nth(2).waitFor();
    check(await iterations.count() === 3, `the loop opens into ${await iterations.count()} iterations`);
    await page.click('#timeline .gantt-row[data-path="count"][data-iteration="2"] button.gantt-name');
    await page.locator('#timeline .gantt-row[data-path="count.inc"]').waitFor();
    check(await page.locator('#timeline .gantt-row[data-path="count.inc"]').count() === 1, 'more than iteration 2 opened');
    await page.click('#timeline-only');
    await page.waitForSelector('#events-scope:has-text("Only the events of iteration 2 of count.")');
    const inIteration = await page.locator('#event-list li').evaluateAll((els) => els.map((e) => [e.dataset.type, e.dataset.iteration]));
    check(JSON.stringify(inIteration) === '[["step-started","2"],["step-succeeded","2"]]', `iteration 2's events are ${JSON.stringify(inIteration)}`);
    await page.click('#events-scope-clear');
    await shot(page, 'timeline-open-desktop');
  });

  await step('the events filter by kind and by a search of their path and data', async () => {
    const total = await page.locator('#event-list li').count();
    await page.selectOption('#events-kind', 'step-retrying');
    await page.waitForSelector('#events-count:has-text("4 of")');
    const kinds = await page.locator('#event-list li').evaluateAll((els) => els.map((e) => e.dataset.type));
    check(kinds.length === 4 && kinds.every((k) => k === 'step-retrying'), `the retries listed are ${JSON.stringify(kinds)}`);
    await page.selectOption('#events-kind', '');
    await page.fill('#events-search', 'flaky-top');
    await page.waitForFunction((n) => document.querySelectorAll('#event-list li').length < n, total);
    const texts = await page.locator('#event-list li').allTextContents();
    check(texts.length === 3 && texts.every((t) => t.includes('flaky-top')), `the search for flaky-top lists ${JSON.stringify(texts)}`);
    // The search reads the data too: the retries carry the error's message.
    await page.fill('#events-search', 'FAILS ONCE');
    await page.waitForSelector('#events-count:has-text("4 of")');
    await page.fill('#events-search', 'no event says this');
    await page.waitForSelector('.events .empty:text("No event matches.")');
    await page.fill('#events-search', '');
    await page.waitForFunction((n) => document.querySelectorAll('#event-list li').length === n, total);
  });

  await step('a suspension without an approval resumes with its data, and a failure shows at the top', async () => {
    const form = page.locator('form.resume-card[data-path="ask"][data-kind="resume"]');
    check((await form.locator('.explain').textContent()).includes('hands the data below to the step'), 'the resume form does not say what it does');
    await form.locator('button[data-action="resume"]').click();
    await page.waitForSelector('#run-status[data-status="success"]');
    await page.locator('#run-result').waitFor();
    await page.locator('#timeline .gantt-row[data-path="ask"] .seg[data-kind="suspended"][data-status="resumed"]').waitFor();
    await page.setViewportSize({ width: 390, height: 844 });
    await fits(page, 'timeline');
    await shot(page, 'timeline-phone');
    await page.locator('section[aria-labelledby="timeline-h"]').screenshot({ path: path.join(ARTIFACTS, 'timeline-phone-panel.png') });
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(`${flowsOrigin}/#/start?workflow=timeline`);
    await page.getByLabel('items').fill('"not a list"');
    await page.click('#start-submit');
    await page.waitForSelector('#run-status[data-status="failed"]');
    await page.waitForSelector('#run-outcome #run-error :text("must be an array")');
    await page.locator('#timeline .gantt-row[data-path="each"][data-status="failed"]').waitFor();
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
    // A bulk action's dry run is a write too: without the token it asks for it, then counts.
    await page.goto(`${guarded}/#/runs?status=suspended`);
    await page.waitForSelector('section.runs h2:text("Runs with status suspended")');
    await page.evaluate(() => sessionStorage.clear());
    await page.click('#bulk-cancel');
    await page.locator('#token-panel:not([hidden])').waitFor();
    await page.fill('#token-input', 's3cret-token');
    await page.click('#token-form button[type="submit"]');
    await page.waitForSelector('#bulk-question:text("No run with status suspended can be cancelled")');
    check(!(await page.isVisible('#bulk-yes')), 'Confirm is offered with nothing to cancel');
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
