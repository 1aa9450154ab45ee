#!/usr/bin/env node
// Prints N distinct TCP ports on 127.0.0.1 that the kernel reports free, one
// per line. All N listeners are open at the same time, so the ports differ.
// Usage: node free-ports.js N
'use strict';

const net = require('net');

const n = Number(process.argv[2] || 1);
if (!Number.isInteger(n) || n < 1 || n > 64) {
  console.error('usage: node free-ports.js N   (1 <= N <= 64)');
  process.exit(2);
}

const servers = [];
let pending = n;
for (let i = 0; i < n; i++) {
  const s = net.createServer();
  s.on('error', (err) => {
    console.error('free-ports: ' + err.message);
    process.exit(1);
  });
  s.listen(0, '127.0.0.1', () => {
    if (--pending === 0) {
      const ports = servers.map((x) => x.address().port);
      servers.forEach((x) => x.close());
      process.stdout.write(ports.join('\n') + '\n');
    }
  });
  servers.push(s);
}
