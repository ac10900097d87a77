-- Minimal init for the headless tests: only this plugin on 'runtimepath', no user config.
local here = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h')
local root = vim.fn.fnamemodify(here, ':h') -- editors/neovim
vim.opt.runtimepath:prepend(root)
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
vim.opt.more = false
vim.g.contenox_test_dir = here
vim.cmd('runtime! plugin/contenox.lua')
