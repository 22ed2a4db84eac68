--- toold.rpc: one JSON-RPC 2.0 connection to the daemon's Unix socket, in both directions,
--- one JSON message a line (the framing the daemon picks for a first byte of `{`).
local uv = vim.uv or vim.loop

local M = {}

local Connection = {}
Connection.__index = Connection

local function decode(line)
  local ok, message = pcall(vim.json.decode, line, { luanil = { object = true, array = true } })
  if ok and type(message) == 'table' then
    return message
  end
end

--- Connects to `path` and reads on in the background. `handlers`: `request(method, params,
--- reply)` for the daemon's requests (`reply(result)` or `reply(nil, error)`),
--- `notify(method, params)` for its notifications, `closed(reason)` once the connection ends.
--- Returns the connection, or nil and why.
function M.connect(path, handlers, timeout_ms)
  local pipe = uv.new_pipe(false)
  local done, failure = false, nil
  pipe:connect(path, function(err)
    failure = err
    done = true
  end)
  vim.wait(timeout_ms or 2000, function()
    return done
  end, 10)
  if not done or failure then
    pipe:close()
    return nil, failure or ('no answer from ' .. path)
  end
  local self = setmetatable({
    pipe = pipe,
    handlers = handlers,
    next_id = 0,
    pending = {},
    buffer = '',
    open = true,
  }, Connection)
  pipe:read_start(function(err, data)
    if err or not data then
      vim.schedule(function()
        self:close(err or 'the daemon closed the connection')
      end)
      return
    end
    self.buffer = self.buffer .. data
    local lines = {}
    while true do
      local at = self.buffer:find('\n', 1, true)
      if not at then
        break
      end
      table.insert(lines, self.buffer:sub(1, at - 1))
      self.buffer = self.buffer:sub(at + 1)
    end
    if #lines > 0 then
      vim.schedule(function()
        for _, line in ipairs(lines) do
          self:dispatch(line)
        end
      end)
    end
  end)
  return self
end

function Connection:send(message)
  if not self.open then
    return false
  end
  message.jsonrpc = '2.0'
  self.pipe:write(vim.json.encode(message) .. '\n')
  return true
end

function Connection:dispatch(line)
  local message = decode(line)
  if not message then
    return
  end
  if message.method and message.id ~= nil then
    local id = message.id
    local answered = false
    local function reply(result, err)
      if answered then
        return
      end
      answered = true
      if err then
        self:send({ id = id, error = err })
      else
        self:send({ id = id, result = result or vim.empty_dict() })
      end
    end
    self.handlers.request(message.method, message.params or {}, reply)
  elseif message.method then
    self.handlers.notify(message.method, message.params or {})
  elseif message.id ~= nil then
    local callback = self.pending[message.id]
    self.pending[message.id] = nil
    if callback then
      callback(message.error, message.result)
    end
  end
end

--- Sends a request; `callback(err, result)` gets its answer.
function Connection:request(method, params, callback)
  self.next_id = self.next_id + 1
  local id = self.next_id
  self.pending[id] = callback
  if not self:send({ id = id, method = method, params = params or vim.empty_dict() }) then
    self.pending[id] = nil
    callback({ message = 'not connected' }, nil)
  end
end

--- Sends a request and waits for its answer (at most `timeout_ms`): `result, err`.
function Connection:request_sync(method, params, timeout_ms)
  local done, err, result = false, nil, nil
  self:request(method, params, function(e, r)
    err, result, done = e, r, true
  end)
  vim.wait(timeout_ms or 10000, function()
    return done
  end, 10)
  if not done then
    return nil, { message = method .. ': no answer within ' .. (timeout_ms or 10000) .. ' ms' }
  end
  return result, err
end

function Connection:close(reason)
  if not self.open then
    return
  end
  self.open = false
  pcall(function()
    self.pipe:read_stop()
    self.pipe:close()
  end)
  for id, callback in pairs(self.pending) do
    self.pending[id] = nil
    callback({ message = 'the connection closed' }, nil)
  end
  self.handlers.closed(reason)
end

return M
