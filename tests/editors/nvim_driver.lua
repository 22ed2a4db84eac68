-- Drives toold.nvim in a headless Neovim for tests/tests/editor_nvim.rs: watches the session
-- TOOLD_TEST_SESSION, answers each approval with the next label of TOOLD_TEST_ANSWERS (comma
-- separated) in place of a person at `vim.ui.select` (after TOOLD_TEST_ANSWER_DELAY_MS, when
-- set, recording the status line then in DIR/answers.jsonl), records every prompt (its labels and its
-- preview buffer) in DIR/prompts.jsonl, and once DIR/done exists writes the session's buffer
-- to DIR/buffer.txt and quits. DIR is TOOLD_TEST_DIR.
local dir = vim.env.TOOLD_TEST_DIR
-- Empty (which `vim.env` reads as nil): watch the newest session, and follow.
local session = vim.env.TOOLD_TEST_SESSION or ''
local answers = vim.split(vim.env.TOOLD_TEST_ANSWERS or '', ',', { plain = true, trimempty = true })

local function append(path, line)
  local file = assert(io.open(dir .. '/' .. path, 'a'))
  file:write(line .. '\n')
  file:close()
end

vim.ui.select = function(items, opts, on_choice)
  if opts.kind ~= 'toold.approval' then
    -- `:TooldSessions`: the first (newest) session, as a person picking the top one.
    append('picked', opts.format_item(items[1]))
    return on_choice(items[1], 1)
  end
  local labels = {}
  for _, item in ipairs(items) do
    table.insert(labels, opts.format_item and opts.format_item(item) or tostring(item))
  end
  -- The preview is the window the plugin opened for this prompt.
  local preview = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  local wanted = table.remove(answers, 1)
  append('prompts.jsonl', vim.json.encode({
    prompt = opts.prompt,
    labels = labels,
    preview = table.concat(preview, '\n'),
    diff = vim.bo.filetype == 'diff',
    pending = require('toold').statusline(),
    answered = wanted or vim.NIL,
  }))
  local chosen, at = nil, nil
  for index, label in ipairs(labels) do
    if label == wanted then
      chosen, at = items[index], index
    end
  end
  local delay = tonumber(vim.env.TOOLD_TEST_ANSWER_DELAY_MS or '')
  if not delay then
    return on_choice(chosen, at)
  end
  -- A person who takes a while: what waits meanwhile, and what was settled elsewhere.
  vim.defer_fn(function()
    append('answers.jsonl', vim.json.encode({ pending = require('toold').statusline() }))
    on_choice(chosen, at)
  end, delay)
end

vim.cmd.runtime('plugin/toold.lua')
require('toold').setup({ socket = vim.env.TOOLD_SOCKET })
vim.cmd('checkhealth toold')
local health = vim.api.nvim_buf_get_lines(0, 0, -1, false)
append('health.txt', table.concat(health, '\n'))
vim.cmd('TooldSessions')
vim.cmd('TooldWatch ' .. session)
local explained = require('toold').explain('run_command', '{"command": "git push"}')
append('explain.json', vim.json.encode(explained))
append('attached', 'yes')

vim.wait(120000, function()
  return vim.uv.fs_stat(dir .. '/done') ~= nil
end, 100)
-- The named session's buffer; following the newest, the one shown now.
local buffer = session ~= '' and vim.fn.bufnr('toold://' .. session) or 0
local lines = vim.api.nvim_buf_get_lines(buffer, 0, -1, false)
local out = assert(io.open(dir .. '/buffer.txt', 'w'))
out:write(table.concat(lines, '\n') .. '\n')
out:close()
vim.cmd('qa!')
