--- toold.nvim: Neovim as a frontend of the shared toold daemon. It watches a session's calls
--- live (`:TooldWatch`), answers its approvals with their previews, explains how a call would
--- be decided (`:TooldExplain`), and reconnects and re-attaches when the daemon restarts.
--- Pure Lua over `vim.uv`: the daemon's socket, JSON-RPC, one message a line.
local rpc = require('toold.rpc')
local approval = require('toold.approval')
local watch = require('toold.watch')

local M = {}

M.version = '0.1.0'

local config = { socket = nil }
local state = {
  connection = nil,
  initialized = nil,
  --- The session watched, and the last event seen of it (to replay from after a restart).
  session_id = nil,
  last_seq = nil,
  --- Following the newest session (no session named).
  following = false,
  --- The sessions seen while following: a session not among them is new.
  known = {},
  reconnecting = nil,
}

--- `opts.socket`: the daemon's socket [default: as `toold status` finds it].
function M.setup(opts)
  config = vim.tbl_extend('force', config, opts or {})
end

--- The socket: the one given to `setup`, else `$TOOLD_SOCKET`, else what `toold status`
--- reports (the config's `socket` key, `$XDG_RUNTIME_DIR/toold/toold.sock`), else the
--- protocol's default.
function M.socket()
  if config.socket then
    return config.socket
  end
  local env = vim.env.TOOLD_SOCKET
  if env and env ~= '' then
    return env
  end
  if vim.fn.executable('toold') == 1 then
    local ok, status = pcall(function()
      return vim.json.decode(vim.fn.system({ 'toold', 'status', '--json' }))
    end)
    if ok and type(status) == 'table' and type(status.socket) == 'string' then
      return status.socket
    end
  end
  local runtime = vim.env.XDG_RUNTIME_DIR
  if runtime and runtime ~= '' then
    return runtime .. '/toold/toold.sock'
  end
  return '/tmp/toold-' .. vim.uv.getuid() .. '/toold.sock'
end

local function notify(message, level)
  vim.notify('toold: ' .. message, level or vim.log.levels.INFO)
end

local reconnect

local handlers = {
  request = function(method, params, reply)
    if method == 'approval/request' then
      approval.enqueue(params, reply)
    else
      reply(nil, { code = -32601, message = 'toold.nvim does not answer ' .. method })
    end
  end,
  notify = function(method, params)
    if method == 'approval/resolved' then
      approval.settled(params.approval_id)
    end
    if params.session_id and params.session_id == state.session_id then
      if params.seq then
        state.last_seq = params.seq
      end
      watch.event(method, params)
    end
  end,
  closed = function()
    state.connection = nil
    approval.reset()
    reconnect()
  end,
}

--- The connection to the daemon, made and initialized when there is none: nil and why when
--- it cannot be.
function M.connection()
  if state.connection then
    return state.connection
  end
  local connection, err = rpc.connect(M.socket(), handlers)
  if not connection then
    return nil, 'no daemon answers on ' .. M.socket() .. ' (' .. tostring(err) .. '); start it with `toold serve`'
  end
  local result, failure = connection:request_sync('initialize', {
    protocol_version = 1,
    client_info = { name = 'toold.nvim', version = M.version },
    capabilities = { approvals = true },
  })
  if not result then
    connection:close('initialize failed')
    return nil, 'the daemon refused initialize: ' .. vim.inspect(failure)
  end
  state.connection = connection
  state.initialized = result
  return connection
end

--- What the daemon said to `initialize` (its version, sandbox, audit log), or nil.
function M.daemon()
  return state.initialized
end

reconnect = function()
  if state.reconnecting then
    return
  end
  local timer = vim.uv.new_timer()
  state.reconnecting = timer
  timer:start(500, 500, vim.schedule_wrap(function()
    if M.connection() then
      timer:stop()
      timer:close()
      state.reconnecting = nil
      if state.session_id then
        M.attach(state.session_id, state.last_seq)
        watch.append(state.session_id, '— reconnected to the daemon —')
      end
    end
  end))
end

--- Attaches to `session_id` (as observer and approver), replaying after `after_seq`.
function M.attach(session_id, after_seq)
  local connection, err = M.connection()
  if not connection then
    return nil, err
  end
  local params = { session_id = session_id }
  if after_seq then
    params.after_seq = after_seq
  end
  local snapshot, failure = connection:request_sync('session/attach', params)
  if not snapshot then
    return nil, (failure and failure.message or 'session/attach failed')
  end
  return snapshot
end

--- The daemon's live sessions, newest first.
function M.sessions()
  local connection, err = M.connection()
  if not connection then
    return nil, err
  end
  local listed, failure = connection:request_sync('session/list', vim.empty_dict())
  if not listed then
    return nil, failure and failure.message
  end
  local sessions = listed.sessions or {}
  -- Creation times are to the second; the daemon numbers its sessions as it creates them.
  local function number(session)
    return tonumber((session.session_id or ''):match('^s_(%d+)_')) or 0
  end
  table.sort(sessions, function(a, b)
    if (a.created_at or '') ~= (b.created_at or '') then
      return (a.created_at or '') > (b.created_at or '')
    end
    return number(a) > number(b)
  end)
  return sessions
end

local follow_timer = nil

--- While following (`:TooldWatch` with no session): a session created after the watched one
--- is watched instead, as `toold watch` does; looked for every second.
local function follow()
  if follow_timer then
    return
  end
  follow_timer = vim.uv.new_timer()
  follow_timer:start(1000, 1000, vim.schedule_wrap(function()
    if not state.following or not state.connection then
      return
    end
    local sessions = M.sessions()
    if not sessions then
      return
    end
    -- The newest of the sessions not seen before: created since the last look.
    local newest = nil
    for _, session in ipairs(sessions) do
      if not state.known[session.session_id] then
        newest = newest or session
        state.known[session.session_id] = true
      end
    end
    if newest and newest.session_id ~= state.session_id then
      local previous = state.session_id
      local shown = previous and vim.api.nvim_get_current_buf() == vim.fn.bufnr('toold://' .. previous)
      M.watch(newest.session_id, { following = true, show = shown })
      if previous then
        watch.append(previous, '— now watching the newer session ' .. newest.session_id .. ' —')
      end
    end
  end))
end

--- Watches `session_id` in `toold://SESSION`; with none, the newest session, and then each
--- session created after it (`opts.following`, `opts.show`: internal).
function M.watch(session_id, opts)
  opts = opts or {}
  if not session_id or session_id == '' then
    opts.following = true
    local sessions, err = M.sessions()
    if not sessions then
      return notify(err, vim.log.levels.ERROR)
    end
    if #sessions == 0 then
      return notify('no session yet; start an agent through toold first', vim.log.levels.WARN)
    end
    session_id = sessions[1].session_id
  end
  if state.session_id and state.session_id ~= session_id and state.connection then
    state.connection:request('session/detach', { session_id = state.session_id }, function() end)
  end
  local snapshot, err = M.attach(session_id)
  if not snapshot then
    return notify('cannot watch ' .. session_id .. ': ' .. tostring(err), vim.log.levels.ERROR)
  end
  state.session_id = session_id
  state.last_seq = snapshot.last_seq
  state.following = opts.following or false
  local header = 'watching ' .. session_id .. ' (' .. (snapshot.title or 'untitled') .. ') in ' .. (snapshot.cwd or '?')
  if opts.show == false then
    watch.append(session_id, header)
  else
    watch.open(session_id, header)
  end
  if state.following then
    -- Every session there is now is known: only one created later is followed.
    for _, session in ipairs(M.sessions() or {}) do
      state.known[session.session_id] = true
    end
    follow()
  end
  return snapshot
end

--- `:TooldSessions`: pick a session to watch.
function M.pick()
  local sessions, err = M.sessions()
  if not sessions then
    return notify(err, vim.log.levels.ERROR)
  end
  vim.ui.select(sessions, {
    prompt = 'toold sessions',
    format_item = function(session)
      return session.session_id .. '  ' .. (session.title or 'untitled') .. '  ' .. (session.cwd or '')
    end,
  }, function(session)
    if session then
      M.watch(session.session_id)
    end
  end)
end

--- `:TooldExplain TOOL JSON`: how the call would be decided in the watched session (or in a
--- session at the current directory), nothing run and nobody asked.
function M.explain(tool, arguments)
  local connection, err = M.connection()
  if not connection then
    return notify(err, vim.log.levels.ERROR)
  end
  local ok, decoded = pcall(vim.json.decode, arguments or '{}')
  if not ok then
    return notify('the arguments are not JSON: ' .. tostring(decoded), vim.log.levels.ERROR)
  end
  local params = { call = { name = tool, arguments = decoded } }
  if state.session_id then
    params.session_id = state.session_id
  else
    params.session = { cwd = vim.fn.getcwd() }
  end
  local explained, failure = connection:request_sync('permissions/explain', params)
  if not explained then
    return notify('explain failed: ' .. vim.inspect(failure), vim.log.levels.ERROR)
  end
  local lines = { tool .. ': ' .. explained.decision .. ' (' .. (explained.step or '-') .. ')', explained.reason or '' }
  if explained.rule then
    table.insert(lines, 'rule: ' .. explained.rule)
  end
  for _, suggestion in ipairs(explained.suggestions or {}) do
    table.insert(lines, 'to allow it: ' .. suggestion)
  end
  notify(table.concat(lines, '\n'))
  return explained
end

--- For the status line: `toold: 2 pending` while approvals wait, else ''.
function M.statusline()
  local pending = approval.pending()
  if pending == 0 then
    return ''
  end
  return 'toold: ' .. pending .. ' pending'
end

return M
