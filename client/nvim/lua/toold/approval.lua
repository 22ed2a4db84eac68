--- toold.approval: the daemon's approval requests, one at a time in the order they came:
--- each shows its preview (a write's or an edit's diff in a `diff` buffer; a command's
--- directory, simple commands and sandbox) and is asked with `vim.ui.select` over the
--- decisions the daemon offers. One settled elsewhere (another approver, a timeout, a cancel)
--- leaves the queue, and its prompt is no longer answered.
local M = {}

--- Waiting: `{params, reply}`, oldest first; `current` is the one being asked.
local queue = {}
local current = nil
local preview_window = nil

--- The decisions as people read them, in the order they are offered.
local CHOICES = {
  { label = 'Allow once', decision = 'allow_once' },
  { label = 'Allow for this session', decision = 'allow_session' },
  { label = 'Always allow', decision = 'allow_always', needs_always = true },
  { label = 'Deny', decision = 'deny' },
  { label = 'Abort', decision = 'abort' },
}

function M.pending()
  return #queue + (current and 1 or 0)
end

local function preview_lines(params)
  local preview = params.preview or {}
  local call = params.call or {}
  local lines = {}
  if preview.kind == 'diff' then
    for line in ((preview.diff ~= '' and preview.diff) or ('(no change to ' .. (preview.path or '?') .. ')')):gmatch('[^\n]*') do
      table.insert(lines, line)
    end
    return lines, 'diff'
  end
  table.insert(lines, 'toold asks: ' .. (call.name or '?'))
  table.insert(lines, 'why: ' .. (params.reason or ''))
  if preview.kind == 'command' then
    table.insert(lines, 'cwd: ' .. (preview.cwd or ''))
    table.insert(lines, 'commands:')
    for _, command in ipairs(preview.commands or {}) do
      table.insert(lines, '  ' .. command)
    end
    local sandbox = preview.sandbox or {}
    table.insert(
      lines,
      'sandbox: ' .. (sandbox.mode or '?') .. (sandbox.network and ', network open' or ', no network')
    )
    for _, dir in ipairs(sandbox.writable or {}) do
      table.insert(lines, '  writes: ' .. dir)
    end
  elseif preview.kind == 'unavailable' then
    table.insert(lines, 'change: cannot be shown (' .. (preview.reason or '') .. ')')
  else
    table.insert(lines, 'arguments: ' .. vim.json.encode(call.arguments or vim.empty_dict()))
  end
  if params.suggestions and params.suggestions[1] then
    table.insert(lines, 'for this session grants: ' .. params.suggestions[1])
  end
  if params.always and params.always.rule then
    table.insert(lines, 'always writes the rule: ' .. params.always.rule)
  end
  return lines, 'toold'
end

local function close_preview()
  if preview_window and vim.api.nvim_win_is_valid(preview_window) then
    vim.api.nvim_win_close(preview_window, true)
  end
  preview_window = nil
end

local function show_preview(params)
  local lines, filetype = preview_lines(params)
  local buffer = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(buffer, 0, -1, false, lines)
  vim.bo[buffer].filetype = filetype
  vim.bo[buffer].modifiable = false
  vim.bo[buffer].bufhidden = 'wipe'
  pcall(vim.api.nvim_buf_set_name, buffer, 'toold://approval/' .. (params.approval_id or '?'))
  vim.cmd('botright split')
  preview_window = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(preview_window, buffer)
end

local ask_next

local function answer(entry, decision)
  if current ~= entry then
    return -- settled elsewhere meanwhile
  end
  current = nil
  close_preview()
  if decision then
    entry.reply({ decision = decision })
  else
    entry.reply({ decision = 'deny' })
  end
  vim.schedule(ask_next)
end

ask_next = function()
  if current or #queue == 0 then
    return
  end
  current = table.remove(queue, 1)
  local entry = current
  local params = entry.params
  show_preview(params)
  local offered = {}
  for _, choice in ipairs(CHOICES) do
    if not choice.needs_always or params.always then
      table.insert(offered, choice)
    end
  end
  local call = params.call or {}
  vim.ui.select(offered, {
    prompt = 'toold: ' .. (call.name or '?') .. ' asks approval (' .. (params.reason or '') .. ')',
    format_item = function(choice)
      return choice.label
    end,
    kind = 'toold.approval',
  }, function(choice)
    answer(entry, choice and choice.decision or nil)
  end)
end

--- An `approval/request` to ask; `reply` answers the daemon.
function M.enqueue(params, reply)
  table.insert(queue, { params = params, reply = reply })
  vim.schedule(ask_next)
end

--- `approval/resolved`: the approval no longer waits for this editor.
function M.settled(approval_id)
  for index, entry in ipairs(queue) do
    if entry.params.approval_id == approval_id then
      table.remove(queue, index)
      return
    end
  end
  if current and current.params.approval_id == approval_id then
    current = nil
    close_preview()
    vim.schedule(ask_next)
  end
end

--- The connection closed: every approval it carried is gone with it.
function M.reset()
  queue = {}
  current = nil
  close_preview()
end

return M
