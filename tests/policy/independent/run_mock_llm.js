// Starts mock-llm (npm @dwmkerr/mock-llm) on 127.0.0.1 with a port the kernel picks, prints
// "PORT <n>" on stdout, and exits when its standard input closes (the test holds the other end).
const path = require('path');
const { createServer } = require('@dwmkerr/mock-llm/dist/server');
const { loadConfig } = require('@dwmkerr/mock-llm/dist/config');

const config = loadConfig(process.argv[2] || path.join(__dirname, 'mock-llm.yaml'));
const app = createServer(config, '127.0.0.1', 0);
const server = app.listen(0, '127.0.0.1', () => {
  process.stdout.write(`PORT ${server.address().port}\n`);
});
server.on('error', (err) => {
  console.error(err);
  process.exit(1);
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
