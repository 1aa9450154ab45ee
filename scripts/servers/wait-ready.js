#!/usr/bin/env node
// Waits until a local test server answers a real request of its protocol.
// Usage: node wait-ready.js KIND PORT PID TIMEOUT_SECONDS
//   KIND is one of kinesis, dynamodb, s3, redis.
// Exits 0 once the server answers; 1 on timeout or when process PID has
// exited (the server died), with the reason on stderr.
'use strict';

const http = require('http');
const net = require('net');

const [kind, portArg, pidArg, timeoutArg] = process.argv.slice(2);
const port = Number(portArg);
const pid = Number(pidArg);
const deadline = Date.now() + Number(timeoutArg || 30) * 1000;

// A request signed with nothing: the stand-ins answer it (with an error
// document or a result), which proves the HTTP stack and router are up.
function probeHTTP(target, body, cb) {
  const headers = {'Content-Type': 'application/x-amz-json-1.1'};
  if (target) headers['X-Amz-Target'] = target;
  const req = http.request(
    {host: '127.0.0.1', port, method: target ? 'POST' : 'GET', path: '/', headers, timeout: 2000},
    (res) => {
      res.resume();
      res.on('end', () => cb(null, 'HTTP ' + res.statusCode));
    });
  req.on('timeout', () => req.destroy(new Error('request timed out')));
  req.on('error', (err) => cb(err));
  req.end(body || '');
}

function probeRedis(cb) {
  const sock = net.connect({host: '127.0.0.1', port});
  let buf = '';
  let done = false;
  const finish = (err, msg) => {
    if (done) return;
    done = true;
    sock.destroy();
    cb(err, msg);
  };
  sock.setTimeout(2000, () => finish(new Error('PING timed out')));
  sock.on('connect', () => sock.write('PING\r\n'));
  sock.on('data', (d) => {
    buf += d.toString();
    if (buf.includes('\r\n')) {
      if (buf.startsWith('+PONG')) finish(null, buf.trim());
      else finish(new Error('unexpected reply ' + JSON.stringify(buf)));
    }
  });
  sock.on('error', (err) => finish(err));
}

function probe(cb) {
  switch (kind) {
    case 'kinesis': return probeHTTP('Kinesis_20131202.ListStreams', '{}', cb);
    case 'dynamodb': return probeHTTP('DynamoDB_20120810.ListTables', '{}', cb);
    case 's3': return probeHTTP('', '', cb);
    case 'redis': return probeRedis(cb);
    default:
      console.error('wait-ready: unknown kind ' + kind);
      process.exit(2);
  }
}

function alive() {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

let lastErr = 'no attempt yet';
function attempt() {
  if (pid > 0 && !alive()) {
    console.error(`wait-ready: ${kind} (pid ${pid}) exited before it answered on port ${port}`);
    process.exit(1);
  }
  if (Date.now() > deadline) {
    console.error(`wait-ready: ${kind} on port ${port} not ready in ${timeoutArg}s: ${lastErr}`);
    process.exit(1);
  }
  probe((err) => {
    if (!err) process.exit(0);
    lastErr = err.message;
    setTimeout(attempt, 100);
  });
}
attempt();
