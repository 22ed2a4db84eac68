-- toold.nvim's commands; the plugin itself loads at their first use.
if vim.g.loaded_toold then
  return
end
vim.g.loaded_toold = true

vim.api.nvim_create_user_command('TooldSessions', function()
  require('toold').pick()
end, { desc = 'toold: pick a session to watch' })

vim.api.nvim_create_user_command('TooldWatch', function(command)
  require('toold').watch(command.args)
end, { nargs = '?', desc = 'toold: watch a session (the newest when none is named)' })

vim.api.nvim_create_user_command('TooldExplain', function(command)
  local tool, arguments = command.args:match('^(%S+)%s*(.*)$')
  require('toold').explain(tool, arguments ~= '' and arguments or '{}')
end, { nargs = '+', desc = 'toold: how a call would be decided (TOOL JSON)' })
