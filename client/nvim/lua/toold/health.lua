--- `:checkhealth toold`: the socket, the daemon reachable and its version, its sandbox.
local M = {}

function M.check()
  local toold = require('toold')
  vim.health.start('toold')
  local socket = toold.socket()
  if vim.uv.fs_stat(socket) then
    vim.health.ok('socket: ' .. socket)
  else
    vim.health.error('no socket at ' .. socket, { 'start the daemon: `toold serve`, or its systemd socket' })
    return
  end
  local connection, err = toold.connection()
  if not connection then
    vim.health.error(err)
    return
  end
  local daemon = toold.daemon() or {}
  local info = daemon.server_info or {}
  vim.health.ok('daemon reachable: ' .. (info.name or 'toold') .. ' ' .. (info.version or '?'))
  local sandbox = daemon.sandbox
  if type(sandbox) == 'table' then
    local degraded = sandbox.degraded or {}
    if #degraded == 0 then
      vim.health.ok('sandbox: every protection enforced')
    else
      vim.health.warn('sandbox: this kernel cannot enforce ' .. table.concat(degraded, ', '))
    end
  end
end

return M
