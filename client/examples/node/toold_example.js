#!/usr/bin/env node
// toold from Node with the JSON-RPC library VS Code extensions already use (vscode-jsonrpc):
// Content-Length framing over the daemon's Unix socket, the `approval/request` handler an
// editor plugin would show as a prompt (here it answers `allow_once`), and the session's events.
//
//   npm ci && node toold_example.js [SOCKET]
//
// The socket: the argument, else $TOOLD_SOCKET, else $XDG_RUNTIME_DIR/toold/toold.sock,
// else /tmp/toold-$UID/toold.sock. Exits 0 when every check passes, 1 with the reason otherwise.
'use strict';

const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const rpc = require('vscode-jsonrpc/node');

const COMMAND = 'echo hello-from-node';
const EXPECTED_OUTPUT = 'hello-from-node\n';
const EVENT_METHODS = [
  'batch/start',
  'tool/call_start',
  'tool/output',
  'tool/result',
  'tool/call_done',
  'approval/resolved',
  'batch/done',
];
const LIFECYCLE = ['batch/start', 'tool/call_start', 'tool/result', 'tool/call_done', 'batch/done'];
const DEADLINE_MS = 30_000;

function socketPath() {
  if (process.argv[2]) return process.argv[2];
  if (process.env.TOOLD_SOCKET) return process.env.TOOLD_SOCKET;
  const runtime = process.env.XDG_RUNTIME_DIR;
  if (runtime && path.isAbsolute(runtime)) return path.join(runtime, 'toold', 'toold.sock');
  return `/tmp/toold-${process.getuid()}/toold.sock`;
}

class CheckFailed extends Error {}

function check(condition, message, detail) {
  if (!condition) {
    const shown = detail === undefined ? '' : `\n  got: ${JSON.stringify(detail)}`;
    throw new CheckFailed(`${message}${shown}`);
  }
}

function connectSocket(file) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(file);
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

async function main() {
  const file = socketPath();
  const socket = await connectSocket(file).catch((err) => {
    throw new CheckFailed(`cannot connect to ${file}: ${err.message} (is \`toold serve\` running?)`);
  });

  const connection = rpc.createMessageConnection(
    new rpc.StreamMessageReader(socket),
    new rpc.StreamMessageWriter(socket),
  );
  let closing = false;
  let lostConnection = null;
  connection.onClose(() => {
    if (!closing) lostConnection = 'the daemon closed the connection';
  });
  connection.onError(([err]) => {
    lostConnection = `connection error: ${err && err.message}`;
  });

  // What an editor plugin would show the user; this example approves once, and remembers.
  const approvals = [];
  connection.onRequest('approval/request', (params) => {
    approvals.push(params);
    return { decision: 'allow_once' };
  });

  // Every event of the attached session, in the order the daemon sent them.
  const events = [];
  for (const method of EVENT_METHODS) {
    connection.onNotification(method, (params) => events.push({ method, params }));
  }
  const others = [];
  connection.onNotification((method, params) => others.push({ method, params }));

  connection.listen();

  const init = await connection.sendRequest('initialize', {
    protocol_version: 1,
    client_info: { name: 'toold-example-node', version: '0.1.0' },
    capabilities: { approvals: true },
  });
  check(init.protocol_version === 1, 'initialize: protocol_version 1', init);
  check(init.server_info && init.server_info.name === 'toold', 'initialize: server_info.name "toold"', init);

  // No allow rule, and the network open to commands (run.sh's config), so the sandbox does not
  // decide: the command must be approved, by us.
  const cwd = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'toold-node-')));
  try {
    const session = await connection.sendRequest('session/create', {
      cwd,
      title: 'toold-example-node',
    });
    check(typeof session.session_id === 'string', 'session/create: a session_id', session);
    const sessionId = session.session_id;

    const response = await connection.sendRequest('tools/execute', {
      session_id: sessionId,
      iteration: 1,
      calls: [{ id: 'call_1', name: 'run_command', arguments: { command: COMMAND } }],
    });

    // The result.
    check(Array.isArray(response.results) && response.results.length === 1,
      'tools/execute: exactly one result', response);
    const [entry] = response.results;
    check(entry.call_id === 'call_1', 'the result is for call_1', entry);
    const result = entry.result;
    check(result.ok === true, 'run_command succeeded', result);
    check(result.content === EXPECTED_OUTPUT, `run_command printed ${JSON.stringify(EXPECTED_OUTPUT)}`, result.content);
    check(result.metadata && result.metadata.exit_code === 0, 'exit_code 0', result.metadata);

    // The approval we answered.
    check(approvals.length === 1, 'exactly one approval/request was answered', approvals);
    const [approval] = approvals;
    check(approval.session_id === sessionId && approval.batch_id === response.batch_id,
      'the approval names our session and batch', approval);
    check(approval.call && approval.call.name === 'run_command' && approval.call.arguments.command === COMMAND,
      'the approval shows the call', approval);

    // The events, in order, all before the tools/execute response.
    const ours = events.filter((e) => e.params.batch_id === response.batch_id);
    const seqs = ours.map((e) => e.params.seq);
    check(seqs.every((seq, i) => i === 0 || seq > seqs[i - 1]), 'event seq strictly increasing', seqs);
    const lifecycle = ours.map((e) => e.method).filter((m) => LIFECYCLE.includes(m));
    check(JSON.stringify(lifecycle) === JSON.stringify(LIFECYCLE),
      `events in order ${LIFECYCLE.join(', ')}`, ours.map((e) => e.method));
    const resolved = ours.find((e) => e.method === 'approval/resolved');
    check(resolved && resolved.params.decision === 'allow_once' && resolved.params.by === 'client',
      'approval/resolved: allow_once by client', resolved && resolved.params);
    const done = ours.find((e) => e.method === 'tool/call_done');
    check(done.params.result.ok === true && done.params.call_id === 'call_1',
      'tool/call_done carries the result', done.params);

    await connection.sendRequest('session/close', { session_id: sessionId });
    check(lostConnection === null, 'the connection stayed up', lostConnection);

    const streamed = ours.filter((e) => e.method === 'tool/output').map((e) => e.params.data).join('');
    console.log(`node: ok: run_command ${JSON.stringify(COMMAND)} -> ${JSON.stringify(result.content)}` +
      ` (approved once: ${JSON.stringify(approval.reason)}; streamed ${JSON.stringify(streamed)})`);
    console.log(`node: events: ${ours.map((e) => `${e.params.seq}:${e.method}`).join(' ')}`);
    if (others.length > 0) {
      console.log(`node: other notifications: ${others.map((e) => e.method).join(' ')}`);
    }
  } finally {
    closing = true;
    connection.dispose();
    socket.end();
    fs.rmSync(cwd, { recursive: true, force: true });
  }
}

const deadline = setTimeout(() => {
  console.error(`node: FAIL: no answer within ${DEADLINE_MS} ms`);
  process.exit(1);
}, DEADLINE_MS);

main().then(
  () => {
    clearTimeout(deadline);
    process.exit(0);
  },
  (err) => {
    clearTimeout(deadline);
    const reason = err instanceof CheckFailed ? err.message
      : err instanceof rpc.ResponseError ? `JSON-RPC error ${err.code}: ${err.message} ${JSON.stringify(err.data)}`
      : (err && err.stack) || String(err);
    console.error(`node: FAIL: ${reason}`);
    process.exit(1);
  },
);
