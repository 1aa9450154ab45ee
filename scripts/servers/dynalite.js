#!/usr/bin/env node
// Starts dynalite (a local DynamoDB server) on 127.0.0.1.
// Usage: node dynalite.js PORT
//
// Tables become ACTIVE at once. dynalite throws from a request's 'error'
// handler when a client goes away in the middle of a request (ECONNRESET,
// "aborted"), which ends the whole server; the crash tests do exactly that
// (a job killed while a write is in flight), so such errors are logged and
// the server goes on. Any other uncaught error still stops it.
'use strict';

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error('usage: node dynalite.js PORT');
  process.exit(2);
}

process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.code === 'EPIPE' || err.message === 'aborted')) {
    console.error('dynalite: client went away mid-request (%s); going on', err.code || err.message);
    return;
  }
  console.error('dynalite: ' + (err && err.stack ? err.stack : err));
  process.exit(1);
});

const server = require('dynalite')({
  createTableMs: 0,
  deleteTableMs: 0,
  updateTableMs: 0,
});

server.on('error', (err) => {
  console.error('dynalite: ' + err.message);
  process.exit(1);
});

server.listen(port, '127.0.0.1', () => {
  const a = server.address();
  console.log('Dynalite listening at: http://%s:%d', a.address, a.port);
});
