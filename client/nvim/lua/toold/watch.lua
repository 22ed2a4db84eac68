--- toold.watch: a session's events, live, in the buffer `toold://SESSION`: each call as it
--- starts, its output as it comes, its result, and how each approval was settled.
local M = {}

local buffers = {}

local function buffer_for(session_id)
  local buffer = buffers[session_id]
  if buffer and vim.api.nvim_buf_is_valid(buffer) then
    return buffer
  end
  buffer = vim.api.nvim_create_buf(true, true)
  vim.api.nvim_buf_set_name(buffer, 'toold://' .. session_id)
  vim.bo[buffer].buftype = 'nofile'
  vim.bo[buffer].swapfile = false
  vim.bo[buffer].filetype = 'toold'
  buffers[session_id] = buffer
  return buffer
end

--- The buffer of `session_id`, made when needed, shown in the current window.
function M.open(session_id, header)
  local buffer = buffer_for(session_id)
  vim.api.nvim_win_set_buf(0, buffer)
  M.append(session_id, header)
  return buffer
end

--- Adds `text` (one or more lines) at the end of the session's buffer.
function M.append(session_id, text)
  local buffer = buffer_for(session_id)
  local lines = vim.split(text, '\n', { plain = true })
  local last = vim.api.nvim_buf_line_count(buffer)
  local first = vim.api.nvim_buf_get_lines(buffer, 0, 1, false)[1]
  if last == 1 and first == '' then
    vim.api.nvim_buf_set_lines(buffer, 0, 1, false, lines)
  else
    vim.api.nvim_buf_set_lines(buffer, last, last, false, lines)
  end
end

local function one_line(value)
  local text = type(value) == 'string' and value or vim.json.encode(value or vim.empty_dict())
  text = text:gsub('[%c]', ' ')
  if #text > 200 then
    text = text:sub(1, 200) .. '…'
  end
  return text
end

--- One event of a watched session, as lines of its buffer.
function M.event(method, params)
  local session_id = params.session_id
  if not session_id then
    return
  end
  local text
  if method == 'tool/call_start' then
    local call = params.call or {}
    text = '▶ ' .. (call.id or '?') .. ' ' .. (call.name or '?') .. ' ' .. one_line(call.arguments)
  elseif method == 'tool/output' then
    text = (params.data or ''):gsub('\n$', '')
  elseif method == 'tool/progress' then
    text = '… ' .. (params.call_id or '?') .. ' ' .. one_line(params.message or params.progress)
  elseif method == 'tool/result' then
    local result = params.result or {}
    if result.ok then
      text = '✓ ' .. (params.call_id or '?') .. ' (' .. (params.elapsed_ms or 0) .. ' ms)'
    else
      text = '✗ '
        .. (params.call_id or '?')
        .. ' '
        .. (result.error_type or 'failed')
        .. ': '
        .. one_line(result.error or '')
    end
  elseif method == 'approval/resolved' then
    text = 'approval of '
      .. (params.call_id or '?')
      .. ': '
      .. (params.decision or 'none')
      .. ' (by '
      .. (params.by or '?')
      .. ')'
  elseif method == 'tool/arguments_replaced' then
    local call = params.call or {}
    text = '↻ ' .. (call.id or '?') .. ' runs with ' .. one_line(call.arguments)
  end
  if text then
    M.append(session_id, text)
  end
end

return M
