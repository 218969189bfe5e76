# triage eval (lint clean set): https://github.com/wandb/wandb/issues/6733
# Pasted in the issue (only one of two DDP processes appears in the W&B group); the thread's answer
#   (umakrishnaswamy, W&B): the run id set in wandb.init is not unique per process; the launch itself
#   (mp.spawn over the GPUs) is not what is wrong. Unmodified below this header.
wandb.require("service")
wandb_log = wandb.init(project=args.project_name, 
                                    config={'args': vars(args)},
                                    id=str(datetime.now().strftime(fmt)),
                                    name=args.name, # +'_'+args.job_id,
                                    tags=[args.project_name, args.name, args.dataset, args.cluster],
                                    resume="None",
                                    group="DDP",
                                    mode=mode
                                    )
mp.spawn(train_val, nprocs=args.gpus, args=(args,wandb_log))
