#!/usr/bin/env node
// weft and a peer workflow engine, measured side by side in one run on one machine.
//
//   node benches/side-by-side.mjs PEER_DIR [--repeat N]
//
// PEER_DIR holds the peer's benchmark: a `bench.mjs` that takes scenario names, reads
// BENCH_INFLIGHT, and prints one JSON line per scenario with `scenario` and `steps_per_s`
// (`npm ci` done there). The peer used for weft's figures is Mastra 1.71's workflow engine;
// its bench is not part of this repository.
//
// Both sides run every scenario with 1 and with 64 runs in flight, N rounds (default 3). Within
// a round each scenario is measured on both sides back to back (seconds apart, the side that goes
// first alternating between rounds), so that both figures of a ratio see the same machine: on a
// shared VM the load moves both sides by a fifth or more over minutes. The weft bench is built
// once (or named by WEFT_BENCH_BIN) and its binary run directly, so nothing is rebuilt between
// rounds. The table compares medians: weft's durable, sandboxed steps (fsync on) against the
// peer at its best of 1 and 64, in memory and on its durable store; weft's p50 latency of one
// run alone against the peer's. A
// second table gives the in-memory ratio of each round alone (each side at its best of 1 and 64
// in that round), their median and the lowest. Each round ends with weft's two floors: `floor`
// (an invocation alone, what "cost/step vs floor" divides by) and `floor_durable` (an invocation
// and a durable record of a `seq10` step's size, with no engine and no store: the part of a
// step's cost that is the disk's). Run it on a quiet machine, or under
// `chrt -f 10` as root: the figures are only comparable when both sides see the same load.

import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dirname, join, resolve } from 'node:path';
import { existsSync } from 'node:fs';

const args = process.argv.slice(2);
const peerDir = args.find((a) => !a.startsWith('--'));
const repeatAt = args.indexOf('--repeat');
const repeat = repeatAt >= 0 ? Math.max(1, Number(args[repeatAt + 1])) : 3;
if (!peerDir || !existsSync(join(peerDir, 'bench.mjs'))) {
  console.error('usage: node benches/side-by-side.mjs PEER_DIR [--repeat N]');
  console.error('PEER_DIR must hold the peer\'s bench.mjs, with its dependencies installed (npm ci).');
  process.exit(2);
}
const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

// weft scenario -> the peer's in-memory and durable scenarios it is compared with.
const SCENARIOS = [
  { weft: 'seq10', mem: 'seq10_inmem', durable: 'seq10_libsql' },
  { weft: 'foreach1000', mem: 'foreach1000' },
  { weft: 'parallel8', mem: 'parallel8' },
  { weft: 'loop100', mem: 'loop100' },
  { weft: 'suspend_resume', mem: 'suspend_resume', durable: 'suspend_resume_libsql' },
];
const IN_FLIGHT = [1, 64];

function jsonLines(text) {
  return text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l));
}

function run(cmd, argv, env, cwd) {
  const r = spawnSync(cmd, argv, {
    cwd,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    maxBuffer: 64 << 20,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  if (r.status !== 0) {
    console.error(`${cmd} ${argv.join(' ')} failed (exit ${r.status})`);
    process.exit(1);
  }
  return jsonLines(r.stdout);
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

// samples[side][inFlight][scenario] = [{steps_per_s, p50_ms}]
const samples = { weft: {}, peer: {} };
const add = (side, n, scenario, figures) => {
  ((samples[side][n] ??= {})[scenario] ??= []).push(figures);
};

// WEFT_BENCH_BIN names a bench binary built before (say, of another commit, to compare two
// builds against the same peer); else the bench is built here.
if (!process.env.WEFT_BENCH_BIN) console.error('building the weft bench (release)...');
const weftBin = process.env.WEFT_BENCH_BIN || run('cargo', ['bench', '--bench', 'workflows', '--no-run', '--message-format=json'], {}, root)
  .find((m) => m.reason === 'compiler-artifact' && m.target?.name === 'workflows' && m.executable)
  ?.executable;
if (!weftBin) {
  console.error('cargo bench --bench workflows --no-run named no executable');
  process.exit(1);
}

const weftRun = (names, n) => {
  for (const r of run(weftBin, names, { WEFT_BENCH_INFLIGHT: String(n) }, root)) {
    add('weft', n, r.scenario, { steps_per_s: r.steps_per_s, p50_ms: r.p50_ms });
  }
};
const peerRun = (names, n) => {
  for (const r of run('node', ['bench.mjs', ...names], { BENCH_INFLIGHT: String(n) }, peerDir)) {
    if (r.skipped || r.error) continue;
    add('peer', n, r.scenario, { steps_per_s: r.steps_per_s, p50_ms: r.us_per_run / 1000 });
  }
};
for (let round = 1; round <= repeat; round++) {
  for (const s of SCENARIOS) {
    const peer = [s.mem, s.durable].filter(Boolean);
    for (const n of IN_FLIGHT) {
      console.error(`round ${round}/${repeat}, ${s.weft}, ${n} in flight`);
      if (round % 2 === 1) {
        weftRun([s.weft], n);
        peerRun(peer, n);
      } else {
        peerRun(peer, n);
        weftRun([s.weft], n);
      }
    }
  }
  weftRun(['floor', 'floor_durable'], 64);
}

const fig = (side, n, scenario, key) => {
  const xs = samples[side][n]?.[scenario];
  return xs ? median(xs.map((x) => x[key])) : undefined;
};
const best = (scenario) =>
  scenario && Math.max(...IN_FLIGHT.map((n) => fig('peer', n, scenario, 'steps_per_s') ?? 0));
const fmt = (x) => (x === undefined || x === 0 ? '–' : Math.round(x).toLocaleString('en-US'));
const ratio = (a, b) => (a && b ? `${(a / b).toFixed(2)}×` : '–');
const floor = fig('weft', 64, 'floor', 'steps_per_s');
const floorDurable = fig('weft', 64, 'floor_durable', 'steps_per_s');

console.log(`weft and the peer, ${new Date().toISOString().slice(0, 10)}, medians of ${repeat} rounds; steps/s`);
console.log('');
console.log('| scenario | weft, 1 in flight | weft, 64 in flight | peer in memory, best of 1/64 | ratio | peer durable, best | ratio | cost/step vs floor | p50 of a run alone, weft / peer |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const s of SCENARIOS) {
  const w1 = fig('weft', 1, s.weft, 'steps_per_s');
  const w64 = fig('weft', 64, s.weft, 'steps_per_s');
  const w = Math.max(w1 ?? 0, w64 ?? 0);
  const mem = best(s.mem);
  const durable = best(s.durable);
  const lat = `${fig('weft', 1, s.weft, 'p50_ms')?.toFixed(3)} ms / ${fig('peer', 1, s.mem, 'p50_ms')?.toFixed(3)} ms`;
  console.log(`| ${s.weft} | ${fmt(w1)} | ${fmt(w64)} | ${fmt(mem)} | ${ratio(w, mem)} | ${fmt(durable)} | ${ratio(w, durable)} | ${ratio(floor, w)} | ${lat} |`);
}
console.log(`| floor | | ${fmt(floor)} | | | | | 1.00× | |`);
console.log(`| floor_durable | | ${fmt(floorDurable)} | | | | | ${ratio(floor, floorDurable)} | |`);

// The in-memory ratio of each round alone: both sides measured seconds apart, at their best.
const inRound = (side, scenario, round) =>
  Math.max(...IN_FLIGHT.map((n) => samples[side][n]?.[scenario]?.[round]?.steps_per_s ?? 0));
console.log('');
console.log('| scenario | ratio to the peer in memory, round by round (weft / peer, steps/s) | median | lowest |');
console.log('|---|---|---|---|');
for (const s of SCENARIOS) {
  const ratios = [];
  const shown = [];
  for (let round = 0; round < repeat; round++) {
    const w = inRound('weft', s.weft, round);
    const p = inRound('peer', s.mem, round);
    if (w && p) {
      ratios.push(w / p);
      // Both sides' figures: a low round shows which of them the machine's load moved.
      shown.push(`${(w / p).toFixed(2)}× (${fmt(w)} / ${fmt(p)})`);
    }
  }
  const x = (r) => `${r.toFixed(2)}×`;
  const mid = ratios.length ? x(median(ratios)) : '–';
  const low = ratios.length ? x(Math.min(...ratios)) : '–';
  console.log(`| ${s.weft} | ${shown.join(', ')} | ${mid} | ${low} |`);
}
